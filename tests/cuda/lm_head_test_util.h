// What the CUDA parity tests of the chunked LM-head losses share (lm_head_ce_cuda_test.cpp,
// lm_head_kl_cuda_test.cpp): the outputs asked for, the near-tie rule for argmax, and the check of
// the accumulated dW.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>

#include "core/tensor.h"
#include "cuda/gemm_family_util.h"

namespace dflash::test {

struct LmWant {
    bool loss = true, argmax = true, dh = true, dw = true;
    DType dh_dtype = DType::bf16;
};

struct LmOutputs {
    HostTensor loss_rows, argmax, dh, dw;
};

inline std::string lm_case_name(int64_t r, int64_t d, int64_t v, int64_t chunk,
                                const LmWant& want) {
    std::ostringstream what;
    what << "R=" << r << " D=" << d << " V=" << v << " chunk=" << chunk << " loss=" << want.loss
         << " argmax=" << want.argmax << " dh=" << want.dh << "(" << dtype_name(want.dh_dtype)
         << ") dw=" << want.dw;
    return what.str();
}

// The logit of vocabulary row `col` for row `row` of h [R, D], in double from the inputs.
inline double lm_logit(const HostTensor& h, const HostTensor& w, int64_t row, int64_t col) {
    const int64_t d = h.dim(1);
    double z = 0;
    for (int64_t k = 0; k < d; ++k)
        z += static_cast<double>(h.f32()[row * d + k]) * w.f32()[col * d + k];
    return z;
}

// Each row's argmax equals the reference's, or is a near-tie: both logits within 1e-4.
inline void expect_lm_argmax(const HostTensor& h, const HostTensor& w, const HostTensor& got,
                             const HostTensor& ref) {
    for (int64_t i = 0; i < h.dim(0); ++i) {
        const int32_t g = got.i32()[i], c = ref.i32()[i];
        if (g == c) continue;
        ASSERT_TRUE(g >= 0 && g < w.dim(0))
            << "row " << i << " argmax " << g << " (cpu " << c << ")";
        const double zg = lm_logit(h, w, i, g), zc = lm_logit(h, w, i, c);
        EXPECT_LE(std::fabs(zg - zc), 1e-4 * (1 + std::fabs(zc)))
            << "row " << i << ": argmax " << g << " (logit " << zg << ") vs cpu " << c << " (logit "
            << zc << ")";
    }
}

inline HostTensor lm_delta(const HostTensor& dw, const HostTensor& dw0) {
    HostTensor d = dw.clone();
    for (int64_t i = 0; i < d.numel(); ++i) d.f32()[i] -= dw0.f32()[i];
    return d;
}

// dW accumulated (+=) onto dw0: the added delta within rel_norm 6e-3 and 3e-2 * max|ref delta| of
// the reference's (g passes through bf16); untouched when not asked.
inline void expect_lm_dw(const HostTensor& got, const HostTensor& ref, const HostTensor& dw0,
                         bool wanted) {
    if (!wanted) {
        EXPECT_EQ(std::memcmp(got.f32(), dw0.f32(), dw0.nbytes()), 0) << "dw not asked";
        return;
    }
    const HostTensor gd = lm_delta(got, dw0), rd = lm_delta(ref, dw0);
    const double tol_abs = 3e-2 * compare(gd, rd, 0).max_ref;
    const Diff d = compare(gd, rd, tol_abs);
    EXPECT_TRUE(d.ok(6e-3, tol_abs)) << "dw delta: " << d.str();
}

// Host outputs for the CPU reference (dw starts as dw0) and the op's out struct (LmHeadCeOut or
// LmHeadKlOut) over those `want` asks for.
inline LmOutputs lm_host_outputs(int64_t r, int64_t d, const HostTensor& dw0) {
    return {HostTensor({r}), HostTensor({r}, DType::i32), HostTensor({r, d}), dw0.clone()};
}
template <class Out>
Out lm_out(const LmOutputs& o, const LmWant& want) {
    Out out;
    if (want.loss) out.loss_rows = o.loss_rows;
    if (want.argmax) out.argmax = o.argmax;
    if (want.dh) out.dh = o.dh;
    if (want.dw) out.dw = o.dw;
    return out;
}

// The op's outputs on the device, poisoned (NaN floats, argmax -7) so that unwritten elements
// fail; dw starts as dw0 (the op accumulates into it), the workspace holds ws_n NaN floats.
struct LmGpuOut {
    DeviceTensor loss, argmax, dh, dw, ws;

    LmGpuOut(Backend& gpu, int64_t r, int64_t d, const HostTensor& dw0, DType dh_dtype,
             int64_t ws_n)
        : loss(to_device(gpu, nan_tensor({r}), DType::f32)),
          argmax(gpu, {r}, DType::i32),
          dh(to_device(gpu, nan_tensor({r, d}), dh_dtype)),
          dw(to_device(gpu, dw0, DType::f32)),
          ws(to_device(gpu, nan_tensor({ws_n}), DType::f32)) {
        HostTensor poison({r}, DType::i32);
        for (int64_t i = 0; i < r; ++i) poison.i32()[i] = -7;
        gpu.upload(argmax, poison);
    }
    // LmHeadCeOut or LmHeadKlOut with the outputs `want` asks for.
    template <class Out>
    Out out(const LmWant& want) const {
        Out o;
        if (want.loss) o.loss_rows = loss;
        if (want.argmax) o.argmax = argmax;
        if (want.dh) o.dh = dh;
        if (want.dw) o.dw = dw;
        o.workspace = ws;
        return o;
    }
    LmOutputs download(Backend& gpu) const {
        LmOutputs o{to_host_f32(gpu, loss), HostTensor(argmax.view().shape(), DType::i32),
                    to_host_f32(gpu, dh), to_host_f32(gpu, dw)};
        gpu.download(o.argmax, argmax);
        return o;
    }
};

}  // namespace dflash::test
