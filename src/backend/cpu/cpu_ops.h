// The CPU reference ops: fp32, plain loops over rows on the backend's thread pool, and GEMM kernels
// of our own (sgemm.h) with runtime CPU dispatch. These are the
// oracle every other backend is checked against. Semantics and shapes are documented once, in the
// op list (backend/op_list.h), and shapes are checked by backend/op_shapes.h (shared with CUDA);
// each family lives in its own file here and is tested in
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

// The ops of backend/op_list.h, each as cpu::<name>(ex, <the op's arguments>), one family per
// file (gemm.cpp, rmsnorm.cpp, ..., selector_loss.cpp).
#define DFLASH_OP(name, params, args) void name(const Exec& ex, DFLASH_UNPAREN params);
#include "backend/op_list.h"

// lm_head_kl.cpp: the f32 elements of LmHeadKlOut::workspace (Backend::lm_head_kl_workspace).
int64_t lm_head_kl_workspace(int64_t rows, int64_t vocab, int64_t chunk);

}  // namespace dflash::cpu
