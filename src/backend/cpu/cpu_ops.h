// The CPU reference ops: fp32, plain loops over rows on the backend's thread pool, and GEMM kernels
// of our own (sgemm.h) with runtime CPU dispatch. These are the
// oracle every other backend is checked against. Semantics and shapes are documented once, on the
// Backend interface (backend/backend.h); each family lives in its own file here and is tested in
// tests/ops/<family>_test.cpp (forward against a naive formula, backward against finite
// differences).
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "backend/ops.h"
#include "core/tensor.h"

namespace dflash::cpu {

// The threads an op may use: the pool of the backend that runs it (Note [CPU threads]). Passed
// explicitly: no op reads a global setting.
struct Exec {
    ThreadPool* pool = nullptr;  // null: one thread
    int threads() const { return pool == nullptr ? 1 : pool->threads(); }
};

// An Exec with a pool of its own, for tests and benchmarks that call the cpu:: ops directly:
// `cpu::gemm(cpu::PooledExec{3}, ...)`.
class PooledExec {
  public:
    explicit PooledExec(int threads) : pool_(std::make_unique<ThreadPool>(threads)) {}
    operator const Exec&() const { return ex_; }  // NOLINT(google-explicit-constructor)
    const Exec& exec() const { return ex_; }

  private:
    std::unique_ptr<ThreadPool> pool_;
    Exec ex_{pool_.get()};
};

// Products of fewer floating-point operations run on one thread: a wake-up costs more than the
// split saves (gemm, linear_bf16).
constexpr double kParallelFlops = 1 << 18;

// Calls fn(begin, end) on near-equal contiguous ranges of [0, n), one per thread of ex (like
// OpenMP's schedule(static)), or once on [0, n) when `parallel` is false or there is one thread.
// A range's bounds depend only on n and the thread count.
template <typename Fn>
void parallel_for(const Exec& ex, int64_t n, bool parallel, Fn&& fn) {
    const int64_t parts = parallel ? std::min<int64_t>(ex.threads(), n) : 1;
    if (parts <= 1) {
        if (n > 0) fn(int64_t{0}, n);
        return;
    }
    ex.pool->run(parts, [&](int64_t p) { fn(p * n / parts, (p + 1) * n / parts); });
}

// checks.cpp: the input check every op family shares. Throws a dflash::Error naming op, name and
// the tensor when `t` is not an f32 tensor on the CPU.
void check_cpu_f32(const Tensor& t, const char* op, const char* name);

// gemm.cpp
void gemm(const Exec& ex, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
          const Tensor& c, float alpha, float beta);

// embedding.cpp
void embedding_fwd(const Exec& ex, const Tensor& table, const Tensor& ids, const Tensor& out);
void embedding_bwd(const Exec& ex, const Tensor& ids, const Tensor& dout, const Tensor& dtable);

// rmsnorm.cpp
void rmsnorm_fwd(const Exec& ex, const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                 const Tensor& rstd);
void rmsnorm_bwd(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& w,
                 const Tensor& rstd, const Tensor& dx, const Tensor& dw);

// rope.cpp (rope_inv_freq is declared in backend/backend.h)
void rope_fwd(const Exec& ex, const Tensor& x, const Tensor& positions, const Tensor& inv_freq);
void rope_bwd(const Exec& ex, const Tensor& dx, const Tensor& positions, const Tensor& inv_freq);

// attention.cpp
void attention_fwd(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                   const AttnMask& mask, const Tensor& out, const Tensor& lse);
void attention_bwd(const Exec& ex, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, const AttnMask& mask,
                   const Tensor& dq, const Tensor& dk, const Tensor& dv);

// swiglu.cpp
void swiglu_fwd(const Exec& ex, const Tensor& gate, const Tensor& up, const Tensor& out);
void swiglu_bwd(const Exec& ex, const Tensor& dout, const Tensor& gate, const Tensor& up,
                const Tensor& dgate, const Tensor& dup);

// elementwise.cpp
void add_inplace(const Exec& ex, const Tensor& y, const Tensor& x, float alpha);
void scale_inplace(const Exec& ex, const Tensor& y, float alpha);
void add_row_bias(const Exec& ex, const Tensor& y, const Tensor& bias);

// lm_head_ce.cpp
void lm_head_ce(const Exec& ex, const Tensor& h, const Tensor& w, const Tensor& labels,
                const Tensor& weights, float grad_scale, int64_t chunk, const LmHeadCeOut& out);

// lm_head_kl.cpp
void lm_head_kl(const Exec& ex, const Tensor& h, const Tensor& t, const Tensor& w,
                const Tensor& weights, float grad_scale, int64_t chunk, const LmHeadKlOut& out);
int64_t lm_head_kl_workspace(int64_t rows, int64_t vocab, int64_t chunk);

// adamw.cpp
void adamw_step(const Exec& ex, const Tensor& master, const Tensor& grad, const Tensor& m,
                const Tensor& v, const AdamWParams& p, const Tensor& grad_scale,
                const Tensor& value);
void sum_squares(const Exec& ex, const Tensor& t, const Tensor& out);
void clip_scale(const Exec& ex, const Tensor& norm_sq, float max_norm, const Tensor& scale);

// copy.cpp
void copy(const Exec& ex, const Tensor& dst, const Tensor& src);
void copy_columns(const Exec& ex, const Tensor& dst, int64_t col, const Tensor& src);
void fill(const Exec& ex, const Tensor& t, float value);
void write_rows(const Exec& ex, const Tensor& dst, const Tensor& row0, const Tensor& src);

// loss_stats.cpp
void loss_stats(const Exec& ex, const Tensor& loss_rows, const Tensor& argmax, const Tensor& labels,
                const Tensor& weights, int64_t period, const Tensor& stats);
void argmax_rows(const Exec& ex, const Tensor& x, const Tensor& out);

// sampling.cpp
void sample_rows(const Exec& ex, const Tensor& logits, const SampleParams& p,
                 const Tensor& uniforms, const Tensor& out);

// dyn_conv.cpp (DFlash2's grouped dynamic causal convolution)
void dyn_conv_fwd(const Exec& ex, const Tensor& x, const Tensor& base, const Tensor& delta,
                  int64_t half, int64_t block_size, const Tensor& y);
void dyn_conv_bwd(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& base,
                  const Tensor& delta, int64_t half, int64_t block_size, const Tensor& dx,
                  const Tensor& dbase, const Tensor& ddelta);

// selector_scores.cpp (DFlash2's candidate selector pair scores)
void selector_scores_fwd(const Exec& ex, const Tensor& z, const Tensor& pred, const Tensor& cand,
                         const Tensor& a, const Tensor& bc, const Tensor& out);
void selector_scores_bwd(const Exec& ex, const Tensor& dscores, const Tensor& z, const Tensor& pred,
                         const Tensor& cand, const Tensor& a, const Tensor& bc, const Tensor& dz,
                         const Tensor& da, const Tensor& dbc);

// topk.cpp
void topk_rows(const Exec& ex, const Tensor& x, const Tensor& values, const Tensor& indices);

// selector_loss.cpp (DFlash2's selector training loss and metrics)
void selector_inject(const Exec& ex, const Tensor& logits, const Tensor& labels,
                     const Tensor& values, const Tensor& ids, const Tensor& label_pos,
                     const Tensor& hit);
void selector_ce(const Exec& ex, const SelectorCeArgs& a);
void selector_stats(const Exec& ex, const Tensor& loss_rows, const Tensor& pick,
                    const Tensor& label_pos, const Tensor& hit, const Tensor& weights,
                    int64_t block, const Tensor& stats);
void selector_unary_bwd(const Exec& ex, const Tensor& dvalues, const Tensor& ids, const Tensor& w,
                        const Tensor& out);

}  // namespace dflash::cpu
