// Linear layers in bf16 on the CPU: y = bf16(x) · bf16(W)ᵀ with fp32 sums, on Intel AMX tiles
// where the CPU has them, else with AVX512-BF16's vdpbf16ps, else with AVX-512F FMAs on the
// weights widened to fp32, and a portable reference kernel of the same product. Used for drafting
// only (infer.cpu_draft_precision): a draft proposes tokens and the target, in fp32, decides, so
// the draft's precision changes which tokens are proposed, never the output. Tested by
// tests/ops/bf16_linear_test.cpp.
//
// Note [bf16 drafting]. Why: an 8-row draft of the demo's 1-layer drafter reads 3.9 MB of fp32
// weights that each verify has evicted from L2, and its dot-product GEMMs run at ~100 GFLOP/s:
// the draft cost 0.48x a 4-layer decode against issue 9's 0.4x (docs/performance.md). In bf16 the
// weights are half the bytes and AMX's tile product (16x16x32 per instruction) makes the
// arithmetic free, so the draft is the weight stream.
//
// The bits. x and W are rounded to bf16 (to nearest, ties to even; denormals to zero, as AMX
// reads them); products of two bf16 values are exact in fp32 and are summed in fp32. The
// portable kernel, the reference, sums each output in one chain over k in order. AMX sums the 32
// products of a tile in an order of its own (measured: no sequential or pairwise model gives its
// bits), so the two agree to within fp32 summation's error bound, not bit for bit (the test checks
// both against an exact sum). vdpbf16ps adds a pair of products at a time, with its own
// roundings (and flushes denormal sums), so it too is held to the bound; the AVX-512F kernel gives
// the portable kernel's bits (a product of two bf16 is exact in fp32, so its FMAs round as the
// portable multiply-adds do, in the same order). Each kernel computes an output the same way
// whatever the split of the outputs over threads, so any thread count gives the same bits.
//
// Without AMX. On the 2-core AMD EPYC (Zen 5, AVX512-BF16, no AMX) the fp32 kernels made a draft
// 0.5x a decode and the bench's speed-up missed 2x (issue 27, docs/performance.md). vdpbf16ps runs
// as many instructions a cycle as an fp32 FMA there with twice the multiply-adds, and both bf16
// forms read the weights in place as 64-byte lines of 16 outputs x one k-pair, so they need no
// lane sums (the dot kernels' cost) and read half the bytes: one draft's products took 0.35-0.40x
// (vdpbf16ps) and 0.42-0.47x (AVX-512F) of the fp32 kernels' time. Without AVX-512, drafting stays
// in f32 (infer.cpu_draft_precision): the portable kernel is ~10x slower than the fp32 GEMMs.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

// W [n, k] fp32 rounded to bf16 and laid out as AMX's B operand: column blocks of 16 outputs,
// each a run of k/32 tiles of [16 k-pairs][16 outputs][2], zero-padded to whole tiles.
struct Bf16Weight {
    struct Free {
        void operator()(void* p) const { std::free(p); }
    };
    int64_t n = 0, k = 0;
    int64_t k_tiles = 0;  // ceil(k / 32)
    std::unique_ptr<uint16_t[], Free> data;
    const float* source = nullptr;  // the fp32 weight it was made from
    int64_t blocks() const { return (n + 15) / 16; }
};

// Whether AMX-BF16 runs here: the CPU has it and Linux granted this process the tile state (asked
// once per process; a fact about the machine, like detected_isa()).
bool amx_bf16_available();

// Whether AVX512-BF16's vdpbf16ps runs here (Intel Cooper Lake and 4th-generation Xeon on, AMD
// Zen 4 on).
bool avx512_bf16_available();

// amx: AMX tiles; avx512_bf16: vdpbf16ps; avx512: AVX-512F FMAs on the weights widened to fp32
// (the portable kernel's bits); portable: scalar C++.
enum class Bf16Kernel { amx, avx512_bf16, avx512, portable };
// amx, else avx512_bf16, else portable: the first this CPU runs.
Bf16Kernel best_bf16_kernel();
bool bf16_kernel_available(Bf16Kernel kernel);
const char* bf16_kernel_name(Bf16Kernel kernel);

// fp32 -> bf16 as AMX reads its inputs: f32_to_bf16 (core/dtype.h: to nearest, ties to even,
// NaN kept a NaN) with denormals to (signed) zero. Back: bf16_to_f32.
uint16_t to_bf16(float f);

// w: [n, k] row-major fp32. Uses ex's threads for large weights.
Bf16Weight pack_bf16_weight(const Exec& ex, const float* w, int64_t n, int64_t k);

// y [m, n] (row stride ldy) = bf16(x) [m, k] (row stride ldx) · Wᵀ + beta * y (y not read when
// beta == 0), split over ex's threads by column blocks.
void linear_bf16(const Exec& ex, int64_t m, const float* x, int64_t ldx, const Bf16Weight& w,
                 float beta, float* y, int64_t ldy);
// The same with the given kernel (tests compare them); it must be available.
void linear_bf16_with(Bf16Kernel kernel, const Exec& ex, int64_t m, const float* x, int64_t ldx,
                      const Bf16Weight& w, float beta, float* y, int64_t ldy);

}  // namespace dflash::cpu
