// Loading a bf16 checkpoint onto the CUDA backend uploads the stored bits as they are (the
// dense tensors by name, and the Hub layout's per-expert tensors stacked expert by expert), with
// no f32 round trip (model/params.h: write_bf16_bits): every parameter must hold the bits the
// CPU's f32 load holds (a bf16 value widens to f32 exactly), for a Qwen3-MoE target (experts per
// expert, a dense-only layer) and a hybrid Qwen3-Next one (fused projections regrouped, the
// f32 path); and a non-finite value in a stored
// tensor is still refused, naming the tensor. Skips visibly without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include "backend/backend_factory.h"
#include "core/checkpoint_io.h"
#include "core/safetensors.h"
#include "model/target.h"
#include "model/tiny_hybrid_models.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

TargetConfig moe_config() {
    TargetConfig c = test::gpu_target_config(256, 3);
    c.model_type = "qwen3_moe";
    c.num_experts = 8;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 48;
    c.norm_topk_prob = true;
    c.mlp_only_layers = {1};
    return c;
}

// Every parameter of a (CUDA) and b (CPU) read back as f32 has the same bits.
std::string first_difference(const TargetModel& a, const TargetModel& b) {
    for (const Param& p : b.params().params()) {
        const HostTensor x = a.params().read_f32(p.name), y = b.params().read_f32(p.name);
        if (x.numel() != y.numel() || std::memcmp(x.f32(), y.f32(), x.nbytes()) != 0) return p.name;
    }
    return "";
}

class TargetLoadCuda : public ::testing::Test {
  protected:
    void SetUp() override {
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
        gpu_ = make_backend(DeviceKind::cuda, 0, 1);
        cpu_ = make_cpu_backend(1);
    }
    std::unique_ptr<Backend> gpu_, cpu_;
};

TEST_F(TargetLoadCuda, Bf16CheckpointsLoadWithTheCpusBits) {
    for (const bool hybrid : {false, true}) {
        const TargetConfig c = hybrid ? test::tiny_qwen3_next_config() : moe_config();
        test::TempDir dir("target_load_cuda");
        TargetModel::random(*cpu_, c, 3, 0.05f).save(dir.path(), DType::bf16);
        const TargetModel on_cpu = TargetModel::load(*cpu_, dir.path());
        const TargetModel on_gpu = TargetModel::load(*gpu_, dir.path());
        EXPECT_EQ(first_difference(on_gpu, on_cpu), "") << (hybrid ? "qwen3_next" : "qwen3_moe");
    }
}

TEST_F(TargetLoadCuda, ANonFiniteBf16ValueIsRefusedByName) {
    test::TempDir dir("target_load_cuda_nan");
    TargetModel m = TargetModel::random(*cpu_, moe_config(), 3, 0.05f);
    const std::string bad = "model.layers.0.self_attn.q_proj.weight";
    HostTensor w = m.params().read_f32(bad);
    w.f32()[5] = std::numeric_limits<float>::infinity();
    m.params().write_f32(bad, w.view());
    m.save(dir.path(), DType::bf16);
    const std::string error = test::error_of([&] { TargetModel::load(*gpu_, dir.path()); });
    EXPECT_TRUE(test::has(error, bad)) << error;
    EXPECT_TRUE(test::has(error, "not finite")) << error;
}

}  // namespace
}  // namespace dflash
