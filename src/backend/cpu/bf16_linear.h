// Linear layers in bf16 on the CPU: y = bf16(x) · bf16(W)ᵀ with fp32 sums, on Intel AMX tiles
// where the CPU has them, and a portable reference kernel of the same product. Used for drafting
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
// both against an exact sum). Each kernel computes an output the same way whatever the split of
// the outputs over threads, so any thread count gives the same bits. Where the CPU has no AMX,
// drafting stays in f32 (infer.cpu_draft_precision): the portable kernel is ~30x slower than
// AMX and slower than the fp32 GEMMs.
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

enum class Bf16Kernel { amx, portable };
// amx when available, else portable.
Bf16Kernel best_bf16_kernel();
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
// The same with the given kernel (tests compare them); amx must be available.
void linear_bf16_with(Bf16Kernel kernel, const Exec& ex, int64_t m, const float* x, int64_t ldx,
                      const Bf16Weight& w, float beta, float* y, int64_t ldy);

}  // namespace dflash::cpu
