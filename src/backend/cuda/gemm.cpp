// cuda::gemm and the GemmEngine (gemm.h): bf16 GEMMs through cuBLASLt with fp32 accumulation and a
// plan cache. Host code (built by the C++ compiler). Tested by tests/cuda/gemm_cuda_test.cpp
// (against the CPU gemm) and tests/ops/gemm_layout_test.cpp (the row-major mapping); measured by
// bench/cuda/gemm_bench.cpp.
#include "backend/cuda/gemm.h"

#include "backend/op_shapes.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/gemm_layout.h"
#include "backend/cuda/kernels/gemm.h"
#include "core/error.h"

namespace dflash::cuda {
namespace {

cublasLtHandle_t lt(void* handle) {
    return static_cast<cublasLtHandle_t>(handle);
}

// A matrix operand: tensors of rank >= 2 are viewed as [numel / last, last] (as the CPU gemm).
void check_operand(const Exec& ex, const Tensor& t, const char* name, bool allow_f32) {
    check_device(ex, t, "gemm", name);
    DF_CHECK(t.dtype() == DType::bf16 || (allow_f32 && t.dtype() == DType::f32),
             "gemm: {} is {} but the CUDA gemm takes {}", name, t.describe(),
             allow_f32 ? "bf16 or f32" : "bf16");
}

}  // namespace

// The cached set-up of one GEMM shape: everything cublasLtMatmul needs but the pointers.
struct GemmEngine::Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;

    Plan() = default;
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;
    ~Plan() {
        if (c) (void)cublasLtMatrixLayoutDestroy(c);
        if (b) (void)cublasLtMatrixLayoutDestroy(b);
        if (a) (void)cublasLtMatrixLayoutDestroy(a);
        if (desc) (void)cublasLtMatmulDescDestroy(desc);
    }
};

GemmEngine::GemmEngine(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
    cublasLtHandle_t h = nullptr;
    DF_CUBLAS_CHECK(cublasLtCreate(&h));
    handle_ = h;
    if (workspace_bytes_ > 0) {
        const cudaError_t err = cudaMalloc(&workspace_, workspace_bytes_);
        if (err != cudaSuccess) {
            (void)cudaGetLastError();
            (void)cublasLtDestroy(h);
            DF_FAIL("GemmEngine: cannot allocate its {}-byte cuBLASLt workspace: {}",
                    workspace_bytes_, cudaGetErrorString(err));
        }
    }
}

GemmEngine::~GemmEngine() {
    plans_.clear();  // descriptors before the handle
    if (workspace_) (void)cudaFree(workspace_);
    if (handle_) (void)cublasLtDestroy(lt(handle_));
}

namespace {

// The matmul descriptor and layouts of a key's shape.
void describe(const std::tuple<int64_t, int64_t, int64_t, bool, bool, int, bool, int>& key,
              cublasLtMatmulDesc_t* desc, cublasLtMatrixLayout_t* la, cublasLtMatrixLayout_t* lb,
              cublasLtMatrixLayout_t* lc) {
    const auto [m, n, k, ta, tb, c_dtype, beta_nonzero, align] = key;
    const LtGemm g = lt_gemm_for_row_major(m, n, k, ta, tb);
    const bool c_bf16 = static_cast<DType>(c_dtype) == DType::bf16;
    DF_CUBLAS_CHECK(cublasLtMatmulDescCreate(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_a = g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = g.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    DF_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    DF_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    const auto layout = [](cublasLtMatrixLayout_t* out, cudaDataType_t type, const LtOperand& o) {
        DF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(out, type, static_cast<uint64_t>(o.rows),
                                                   static_cast<uint64_t>(o.cols), o.ld));
    };
    layout(la, CUDA_R_16BF, g.a);
    layout(lb, CUDA_R_16BF, g.b);
    layout(lc, c_bf16 ? CUDA_R_16BF : CUDA_R_32F, g.c);
}

// A small-row GEMM's key for the shared algorithm: kRowInvariantRows rows, at most 16-byte
// alignments (what any row view of ours has), so the choice does not depend on where the rows
// start either.
int clamp_alignments(int align) {
    int out = 0;
    for (int shift = 0; shift < 12; shift += 4) out |= std::min((align >> shift) & 0xf, 4) << shift;
    return out;
}

}  // namespace

bool GemmEngine::heuristic(const Key& key, void* algo_out, size_t* workspace_out) {
    const auto [m, n, k, ta, tb, c_dtype, beta_nonzero, align] = key;
    const bool c_bf16 = static_cast<DType>(c_dtype) == DType::bf16;
    const bool shared = m <= kRowInvariantRows;
    Plan p;  // the descriptors the heuristic is asked about (destroyed on return)
    describe(key, &p.desc, &p.a, &p.b, &p.c);
    cublasLtMatmulPreference_t pref = nullptr;
    DF_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = workspace_bytes_;
    // Split-K partial sums stored in a bf16 output would round the fp32 accumulation: allow only
    // schemes that reduce in the compute type (fp32) when C is bf16. The shared small-row
    // algorithm may split K (it must, to keep the SMs busy on a few rows), but only into a
    // workspace reduced in a fixed order: never in place in C.
    const uint32_t schemes =
        shared || c_bf16 ? (CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
                         : CUBLASLT_REDUCTION_SCHEME_MASK;
    // cuBLASLt's user-side pointers: our B is its A, our A its B (gemm_layout.h).
    const uint32_t align_a = 1u << (align & 0xf), align_b = 1u << ((align >> 4) & 0xf),
                   align_c = 1u << ((align >> 8) & 0xf);
    cublasLtMatmulHeuristicResult_t result{};
    int found_count = 0;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    for (const auto& [attr, value] :
         {std::pair{CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_b},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_a},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
          std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}}) {
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value));
    }
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws, sizeof(ws));
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(lt(handle_), p.desc, p.a, p.b, p.c, p.c, pref, 1,
                                            &result, &found_count);
    (void)cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found_count == 0 || result.state != CUBLAS_STATUS_SUCCESS)
        return false;
    *static_cast<cublasLtMatmulAlgo_t*>(algo_out) = result.algo;
    *workspace_out = result.workspaceSize;
    return true;
}

GemmEngine::Plan& GemmEngine::plan_for(const Key& key) {
    const auto found = plans_.find(key);
    if (found != plans_.end()) return *found->second;
    const auto [m, n, k, ta, tb, c_dtype, beta_nonzero, align] = key;
    auto plan = std::make_unique<Plan>();
    describe(key, &plan->desc, &plan->a, &plan->b, &plan->c);
    bool ok = false;
    if (m <= kRowInvariantRows) {
        // The algorithm of the kRowInvariantRows-row shape, checked for this row count.
        Key shared = key;
        std::get<0>(shared) = kRowInvariantRows;
        std::get<7>(shared) = clamp_alignments(align);
        cublasLtMatmulHeuristicResult_t check{};
        ok = heuristic(shared, &plan->algo, &plan->workspace) &&
             cublasLtMatmulAlgoCheck(lt(handle_), plan->desc, plan->a, plan->b, plan->c, plan->c,
                                     &plan->algo, &check) == CUBLAS_STATUS_SUCCESS &&
             check.state == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= workspace_bytes_;
        if (ok) plan->workspace = check.workspaceSize;
        if (!ok) ++row_variant_plans_;
    }
    if (!ok) ok = heuristic(key, &plan->algo, &plan->workspace);
    const uint32_t align_a = 1u << (align & 0xf), align_b = 1u << ((align >> 4) & 0xf),
                   align_c = 1u << ((align >> 8) & 0xf);
    DF_CHECK(ok,
             "gemm: cuBLASLt has no algorithm for op(A) [{}, {}] x op(B) [{}, {}]{}{} -> {} C "
             "(alignments A {}, B {}, C {} bytes, workspace {} bytes)",
             m, k, k, n, ta ? " (A transposed)" : "", tb ? " (B transposed)" : "",
             static_cast<DType>(c_dtype) == DType::bf16 ? "bf16" : "f32", align_a, align_b, align_c,
             workspace_bytes_);
    (void)beta_nonzero;  // part of the key: the heuristic may choose differently when C is read
    return *plans_.emplace(key, std::move(plan)).first->second;
}

void GemmEngine::run(CUstream_st* stream, const Tensor& a, bool trans_a, const Tensor& b,
                     bool trans_b, const Tensor& c, float alpha, float beta) {
    const int64_t a_cols = a.dim(-1), b_cols = b.dim(-1), c_cols = c.dim(-1);
    const int64_t m = c.numel() / c_cols, n = c_cols;
    const int64_t k = trans_a ? a.numel() / a_cols : a_cols;
    (void)b_cols;
    const auto address = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()); };
    const int align = alignment_log2(pointer_alignment(address(a))) |
                      alignment_log2(pointer_alignment(address(b))) << 4 |
                      alignment_log2(pointer_alignment(address(c))) << 8;
    const Key key{m, n, k, trans_a, trans_b, static_cast<int>(c.dtype()), beta != 0.0f, align};
    Plan& p = plan_for(key);
    ++calls_;
    // Column-major Cᵀ = op(B)ᵀ · op(A)ᵀ: cuBLASLt's A is our B (gemm_layout.h).
    DF_CUBLAS_CHECK(cublasLtMatmul(lt(handle_), p.desc, &alpha, b.data(), p.a, a.data(), p.b, &beta,
                                   c.data(), p.c, c.data(), p.c, &p.algo, workspace_, p.workspace,
                                   stream));
}

void gemm(const Exec& ex, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
          const Tensor& c, float alpha, float beta) {
    check_operand(ex, a, "A", false);
    check_operand(ex, b, "B", false);
    check_operand(ex, c, "C", true);
    const auto [m, n, k] = check_gemm_shapes(a, trans_a, b, trans_b, c);
    DF_CHECK(ex.gemm != nullptr, "gemm: this CUDA backend has no GemmEngine");
    if (m == 0 || n == 0) return;
    if (k == 0) {
        // op(A)·op(B) is the zero matrix; cuBLASLt is not asked about empty operands.
        if (beta == 0.0f) {
            DF_CUDA_CHECK(cudaMemsetAsync(c.data(), 0, c.nbytes(), ex.stream));
        } else if (beta != 1.0f) {
            scale_matrix(c.data(), c.dtype() == DType::bf16, c.numel(), beta, ex.stream);
        }
        return;
    }
    ex.gemm->run(ex.stream, a, trans_a, b, trans_b, c, alpha, beta);
}

}  // namespace dflash::cuda
