// DSpark's rnn Markov head, the slot recurrence and its backward, the CPU reference (semantics:
// Backend::markov_rnn_fwd / markov_rnn_bwd in backend/op_list.h; recipe spec §1.2). Plain loops,
// one block of slots per task. Tested by tests/ops/markov_rnn_test.cpp (against a double
// formula and finite differences) and as the oracle of tests/cuda/markov_rnn_cuda_test.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

float sigmoid(float x) {
    // Never exp of a large positive number (as the CUDA kernels' sigmoid).
    if (x >= 0.0f) return 1.0f / (1.0f + std::exp(-x));
    const float e = std::exp(x);
    return e / (1.0f + e);
}

// The state's part of a_k: sum_c j[i, c] s[c] over c = 0..r-1 in order.
float state_dot(const float* j, int64_t C, int64_t i, const float* s, int64_t r) {
    float acc = 0.0f;
    for (int64_t c = 0; c < r; ++c) acc += j[i * C + c] * s[c];
    return acc;
}

}  // namespace

void markov_rnn_fwd(const Exec& ex, const Tensor& pre, const Tensor& bias, const Tensor& j,
                    int64_t block_size, const Tensor& act, const Tensor& out) {
    constexpr const char* op = "markov_rnn_fwd";
    check_cpu_f32(pre, op, "pre");
    check_cpu_f32(bias, op, "bias");
    check_cpu_f32(j, op, "j");
    check_cpu_f32(act, op, "act");
    check_cpu_f32(out, op, "out");
    const MarkovRnnDims d = check_markov_rnn_fwd_shapes(pre, bias, j, block_size, act, out);
    const int64_t r = d.r, A = 3 * r, blocks = d.R / block_size;
    parallel_for(ex, blocks, blocks * block_size * A * r > (1 << 16), [&](int64_t b0, int64_t b1) {
        std::vector<float> s(static_cast<size_t>(r));
        for (int64_t b = b0; b < b1; ++b) {
            std::fill(s.begin(), s.end(), 0.0f);
            for (int64_t k = 0; k < block_size; ++k) {
                const int64_t row = b * block_size + k;
                float* a = act.f32() + row * A;
                for (int64_t i = 0; i < A; ++i)
                    a[i] = pre.f32()[row * A + i] + bias.f32()[i] +
                           state_dot(j.f32(), d.C, i, s.data(), r);
                for (int64_t c = 0; c < r; ++c) {
                    const float g = sigmoid(a[c]);
                    s[static_cast<size_t>(c)] =
                        g * s[static_cast<size_t>(c)] + (1.0f - g) * std::tanh(a[r + c]);
                    out.f32()[row * r + c] = std::tanh(a[2 * r + c]);
                }
            }
        }
    });
}

void markov_rnn_bwd(const Exec& ex, const Tensor& dout, const Tensor& act, const Tensor& j,
                    int64_t block_size, const Tensor& dact, const Tensor& dbias,
                    const Tensor& s_prev) {
    constexpr const char* op = "markov_rnn_bwd";
    check_cpu_f32(dout, op, "dout");
    check_cpu_f32(act, op, "act");
    check_cpu_f32(j, op, "j");
    check_cpu_f32(dact, op, "dact");
    check_cpu_f32(dbias, op, "dbias");
    check_cpu_f32(s_prev, op, "s_prev");
    const MarkovRnnDims d =
        check_markov_rnn_bwd_shapes(dout, act, j, block_size, dact, dbias, s_prev);
    const int64_t r = d.r, A = 3 * r, blocks = d.R / block_size;
    const float* jw = j.f32();
    parallel_for(ex, blocks, blocks * block_size * A * r > (1 << 16), [&](int64_t b0, int64_t b1) {
        std::vector<float> ds(static_cast<size_t>(r)), next(static_cast<size_t>(r));
        for (int64_t b = b0; b < b1; ++b) {
            // The states before each slot, forward from 0 (act holds every pre-activation).
            std::vector<float> s(static_cast<size_t>(r), 0.0f);
            for (int64_t k = 0; k < block_size; ++k) {
                const int64_t row = b * block_size + k;
                const float* a = act.f32() + row * A;
                for (int64_t c = 0; c < r; ++c) {
                    s_prev.f32()[row * r + c] = s[static_cast<size_t>(c)];
                    const float g = sigmoid(a[c]);
                    s[static_cast<size_t>(c)] =
                        g * s[static_cast<size_t>(c)] + (1.0f - g) * std::tanh(a[r + c]);
                }
            }
            // Backward over the slots; nothing flows into the last slot's state.
            std::fill(ds.begin(), ds.end(), 0.0f);
            for (int64_t k = block_size - 1; k >= 0; --k) {
                const int64_t row = b * block_size + k;
                const float* a = act.f32() + row * A;
                float* da = dact.f32() + row * A;
                for (int64_t c = 0; c < r; ++c) {
                    const float g = sigmoid(a[c]);
                    const float cand = std::tanh(a[r + c]);
                    const float o = std::tanh(a[2 * r + c]);
                    const float sp = s_prev.f32()[row * r + c];
                    const float dsk = ds[static_cast<size_t>(c)];
                    da[c] = dsk * (sp - cand) * g * (1.0f - g);
                    da[r + c] = dsk * (1.0f - g) * (1.0f - cand * cand);
                    da[2 * r + c] = dout.f32()[row * r + c] * (1.0f - o * o);
                    next[static_cast<size_t>(c)] = dsk * g;
                }
                for (int64_t i = 0; i < A; ++i)
                    for (int64_t c = 0; c < r; ++c)
                        next[static_cast<size_t>(c)] += jw[i * d.C + c] * da[i];
                ds.swap(next);
            }
        }
    });
    // The bias's gradient, rows in order (one thread: a fixed summation order).
    for (int64_t row = 0; row < d.R; ++row)
        for (int64_t i = 0; i < A; ++i) dbias.f32()[i] += dact.f32()[row * A + i];
}

}  // namespace dflash::cpu
