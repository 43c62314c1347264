// CUDA fill_normal_hash against the CPU reference: the same f32 bits, element by element (the
// kernel's double arithmetic is rounded op by op as the host's), and into bf16 the CPU's value
// rounded; sizes that do not fill a block, and one past a grid's worth. And a random drafter made
// on the GPU holds the CPU one's weights rounded to bf16 (ParamSet::init_random draws on the
// device), its masters when training likewise.
#include <cstring>

#include "cuda/elem_test_util.h"
#include "model/drafter.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

class CudaNormalFill : public test::CudaVsCpu {};

TEST_F(CudaNormalFill, DrawsTheCpuBits) {
    for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{100003}, int64_t{5} << 20}) {
        SCOPED_TRACE(n);
        const uint64_t seed = 0x9abcdef012345678ULL + static_cast<uint64_t>(n);
        HostTensor ref({n});
        cpu().fill_normal_hash(ref, seed, 0.02f);
        DeviceTensor x(gpu(), {n}, DType::f32);
        test::poison(gpu(), x);
        gpu().fill_normal_hash(x, seed, 0.02f);
        const HostTensor got = test::to_cpu(gpu(), x);
        int64_t differ = 0, first = -1;
        for (int64_t i = 0; i < n; ++i)
            if (std::memcmp(&got.f32()[i], &ref.f32()[i], sizeof(float)) != 0) {
                if (first < 0) first = i;
                ++differ;
            }
        EXPECT_EQ(differ, 0) << "first at " << first << ": gpu " << got.f32()[first] << " cpu "
                             << ref.f32()[first];
        DeviceTensor xb(gpu(), {n}, DType::bf16);
        gpu().fill_normal_hash(xb, seed, 0.02f);
        const HostTensor gb = test::to_cpu(gpu(), xb);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(gb.f32()[i], test::round_bf16(ref.f32()[i])) << i;
    }
}

TEST_F(CudaNormalFill, RandomDrafterOnTheGpuIsTheCpuOne) {
    const TargetConfig tc = test::tiny_target_config();
    for (const DrafterConfig& dc :
         {test::tiny_drafter_config(tc, 2, 4), test::tiny_dflash2_config(tc, 2, 4)}) {
        const DrafterModel a = DrafterModel::random(cpu(), dc, 9);
        DrafterModel b(gpu(), dc);
        b.params().enable_training();
        b.randomize(9);
        for (const Param& p : a.params().params()) {
            const HostTensor want = a.params().read_f32(p.name);
            const HostTensor master = b.params().read_f32(p.name);  // f32 masters
            const HostTensor value = to_host_f32(gpu(), b.params().value(p.name));
            for (int64_t i = 0; i < want.numel(); ++i) {
                ASSERT_EQ(master.f32()[i], want.f32()[i]) << p.name << " " << i;
                ASSERT_EQ(value.f32()[i], test::round_bf16(want.f32()[i])) << p.name << " " << i;
            }
        }
    }
}

}  // namespace
}  // namespace dflash
