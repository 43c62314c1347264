// GemmEngine: bf16 GEMMs through cuBLASLt on one device (docs/design.md "The op contract"): one
// handle, an explicit workspace (32 MiB by default, what cuBLAS asks for on Hopper), and a plan
// cache keyed by (m, n, k, transposes, output dtype, beta == 0, pointer alignments) holding the
// matmul descriptor, layouts and the heuristic's algorithm, so a steady-state call does no
// descriptor set-up. Row-major tensors are mapped onto cuBLASLt's column-major convention by
// computing Cᵀ = op(B)ᵀ · op(A)ᵀ (gemm_layout.h).
//
// Row invariance: a GEMM of at most kRowInvariantRows rows runs the algorithm chosen for exactly
// kRowInvariantRows rows (16-byte alignment assumed; K split, if at all, the same way and reduced
// in a fixed order), so every row of the result has the same bits whatever the number of rows
// beside it. Decoding depends on it: a 1-token decode
// step and a 16-token verify step must give the same logits for the same position, or greedy
// speculative decoding could pick another token than plain decoding at a near-tie.
// Created on the thread that drives the device; not thread-safe (one per CudaBackend).
// Tested by tests/cuda/gemm_cuda_test.cpp; measured by bench/cuda/gemm_bench.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "core/tensor.h"

struct CUstream_st;

namespace dflash::cuda {

class GemmEngine {
  public:
    // Creates the cuBLASLt handle and the workspace on the current CUDA device.
    explicit GemmEngine(size_t workspace_bytes = size_t{32} << 20);
    ~GemmEngine();
    GemmEngine(const GemmEngine&) = delete;
    GemmEngine& operator=(const GemmEngine&) = delete;

    // C = alpha * op(A) · op(B) + beta * C (row-major; rank > 2 viewed as [numel/last, last]).
    // A, B bf16; C bf16 or f32. Shapes are checked by the caller (cuda::gemm).
    void run(CUstream_st* stream, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
             const Tensor& c, float alpha, float beta);

    // A verify step's rows (a DFlash block is at most 16 tokens).
    static constexpr int64_t kRowInvariantRows = 16;

    int64_t plans() const { return static_cast<int64_t>(plans_.size()); }
    int64_t calls() const { return calls_; }
    // Small-row plans whose shared algorithm cuBLASLt refused for their row count, so they run
    // their own (row invariance lost for them); tests expect 0.
    int64_t row_variant_plans() const { return row_variant_plans_; }

  private:
    struct Plan;
    // (m, n, k, trans_a, trans_b, C dtype, beta != 0, log2 alignments of A, B, C packed 4 bits
    // each).
    using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int, bool, int>;
    Plan& plan_for(const Key& key);
    // The heuristic's first algorithm for `key` (m, alignments as given), or false.
    bool heuristic(const Key& key, void* algo_out, size_t* workspace_out);

    void* handle_ = nullptr;     // cublasLtHandle_t
    void* workspace_ = nullptr;  // device memory
    size_t workspace_bytes_ = 0;
    std::map<Key, std::unique_ptr<Plan>> plans_;
    int64_t calls_ = 0;
    int64_t row_variant_plans_ = 0;
};

}  // namespace dflash::cuda
