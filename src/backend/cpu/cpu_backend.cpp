// CpuBackend: the Backend interface over the cpu:: reference ops. The CPU "device" is host memory,
// so allocation is aligned host memory, transfers are copies and everything runs immediately, on
// the backend's own thread pool (Note [CPU threads] in cpu/thread_pool.h).
// Tested by tests/ops/*_test.cpp, tests/model/*_test.cpp and tests/infer/*_test.cpp.
#include <cstdlib>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/bf16_linear.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/host_collectives.h"

namespace dflash {
namespace {

// The CPU's PreparedWeight: the weight in bf16 tiles for cpu::linear_bf16.
struct CpuBf16Weight final : PreparedWeight {
    cpu::Bf16Weight packed;
};

class CpuBackend final : public Backend {
  public:
    explicit CpuBackend(int threads) : pool_(threads < 1 ? 1 : threads), ex_{&pool_} {}
    std::string name() const override { return "cpu"; }
    std::unique_ptr<DeviceCollectives> make_device_collectives(Communicator& host,
                                                               const CollectiveOptions&) override {
        return cpu::make_host_collectives(host);
    }
    DeviceRef device() const override { return {}; }
    DType compute_dtype() const override { return DType::f32; }

    Buffer allocate(size_t bytes) override {
        // 256 bytes, like cudaMalloc: workspace slices keep the alignment the CUDA kernels need.
        const size_t rounded = std::max<size_t>(256, (bytes + 255) / 256 * 256);
        void* p = std::aligned_alloc(256, rounded);
        DF_CHECK(p != nullptr, "out of host memory allocating {} bytes", rounded);
        std::memset(p, 0, rounded);
        return Buffer(p, bytes, DeviceRef{}, [](void* q) { std::free(q); });
    }
    Buffer allocate_host(size_t bytes) override { return allocate(bytes); }

    void upload(const Tensor& dst, const Tensor& src) override {
        check_transfer(dst, src, "upload");
        if (dst.data() != src.data()) std::memcpy(dst.data(), src.data(), src.nbytes());
    }
    void download(const Tensor& dst, const Tensor& src) override {
        check_transfer(dst, src, "download");
        if (dst.data() != src.data()) std::memcpy(dst.data(), src.data(), src.nbytes());
    }
    void copy(const Tensor& dst, const Tensor& src) override { cpu::copy(ex_, dst, src); }
    void copy_columns(const Tensor& dst, int64_t col, const Tensor& src) override {
        cpu::copy_columns(ex_, dst, col, src);
    }
    void fill(const Tensor& t, float value) override { cpu::fill(ex_, t, value); }
    void write_rows(const Tensor& dst, const Tensor& row0, const Tensor& src) override {
        cpu::write_rows(ex_, dst, row0, src);
    }
    void synchronize() override {}

    void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, float alpha,
              float beta) override {
        cpu::gemm(ex_, a, ta, b, tb, c, alpha, beta);
    }
    std::unique_ptr<PreparedWeight> prepare_bf16_weight(const Tensor& w) override {
        if (!cpu::amx_bf16_available()) return nullptr;  // gemm's fp32 kernels are faster
        cpu::check_cpu_f32(w, "prepare_bf16_weight", "W");
        DF_CHECK(w.rank() == 2, "prepare_bf16_weight: W has shape {}; expected [N, K]",
                 w.shape().to_string());
        auto p = std::make_unique<CpuBf16Weight>();
        p->packed = cpu::pack_bf16_weight(ex_, w.f32(), w.dim(0), w.dim(1));
        return p;
    }
    void linear(const Tensor& x, const Tensor& w, const PreparedWeight* prepared, const Tensor& y,
                float beta) override {
        if (prepared == nullptr) return cpu::gemm(ex_, x, false, w, true, y, 1.0f, beta);
        const auto* p = dynamic_cast<const CpuBf16Weight*>(prepared);
        DF_CHECK(p != nullptr, "linear: the prepared weight is not the CPU backend's");
        DF_CHECK(p->packed.source == w.f32() && p->packed.n == w.dim(0) && p->packed.k == w.dim(-1),
                 "linear: the prepared weight was made from another tensor than {}", w.describe());
        cpu::check_cpu_f32(x, "linear", "x");
        cpu::check_cpu_f32(y, "linear", "y");
        const int64_t k = x.dim(-1), m = k == 0 ? 0 : x.numel() / k;
        DF_CHECK(k == p->packed.k && y.dim(-1) == p->packed.n && y.numel() == m * p->packed.n,
                 "linear: x {} · Wᵀ (W [{}, {}]) into y {}", x.shape().to_string(), p->packed.n,
                 p->packed.k, y.shape().to_string());
        cpu::linear_bf16(ex_, m, x.f32(), k, p->packed, beta, y.f32(), p->packed.n);
    }
    void embedding_fwd(const Tensor& table, const Tensor& ids, const Tensor& out) override {
        cpu::embedding_fwd(ex_, table, ids, out);
    }
    void embedding_bwd(const Tensor& ids, const Tensor& dout, const Tensor& dtable) override {
        cpu::embedding_bwd(ex_, ids, dout, dtable);
    }
    void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                     const Tensor& rstd) override {
        cpu::rmsnorm_fwd(ex_, x, w, eps, y, rstd);
    }
    void rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw) override {
        cpu::rmsnorm_bwd(ex_, dy, x, w, rstd, dx, dw);
    }
    void rope_fwd(const Tensor& x, const Tensor& pos, const Tensor& f) override {
        cpu::rope_fwd(ex_, x, pos, f);
    }
    void rope_bwd(const Tensor& dx, const Tensor& pos, const Tensor& f) override {
        cpu::rope_bwd(ex_, dx, pos, f);
    }
    void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const AttnMask& mask,
                       const Tensor& out, const Tensor& lse) override {
        cpu::attention_fwd(ex_, q, k, v, mask, out, lse);
    }
    void attention_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& out, const Tensor& lse, const AttnMask& mask, const Tensor& dq,
                       const Tensor& dk, const Tensor& dv) override {
        cpu::attention_bwd(ex_, dout, q, k, v, out, lse, mask, dq, dk, dv);
    }
    void swiglu_fwd(const Tensor& gate, const Tensor& up, const Tensor& out) override {
        cpu::swiglu_fwd(ex_, gate, up, out);
    }
    void swiglu_bwd(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                    const Tensor& dup) override {
        cpu::swiglu_bwd(ex_, dout, gate, up, dgate, dup);
    }
    void add_inplace(const Tensor& y, const Tensor& x, float alpha) override {
        cpu::add_inplace(ex_, y, x, alpha);
    }
    void scale_inplace(const Tensor& y, float alpha) override { cpu::scale_inplace(ex_, y, alpha); }
    void add_row_bias(const Tensor& y, const Tensor& bias) override {
        cpu::add_row_bias(ex_, y, bias);
    }
    void lm_head_ce(const Tensor& h, const Tensor& w, const Tensor& labels, const Tensor& weights,
                    float grad_scale, int64_t chunk, const LmHeadCeOut& out) override {
        cpu::lm_head_ce(ex_, h, w, labels, weights, grad_scale, chunk, out);
    }
    int64_t lm_head_ce_workspace(int64_t rows, int64_t, int64_t vocab,
                                 int64_t chunk) const override {
        return rows * std::min(chunk, vocab);
    }
    void lm_head_kl(const Tensor& h, const Tensor& t, const Tensor& w, const Tensor& weights,
                    float grad_scale, int64_t chunk, const LmHeadKlOut& out) override {
        cpu::lm_head_kl(ex_, h, t, w, weights, grad_scale, chunk, out);
    }
    int64_t lm_head_kl_workspace(int64_t rows, int64_t, int64_t vocab,
                                 int64_t chunk) const override {
        return cpu::lm_head_kl_workspace(rows, vocab, chunk);
    }
    void loss_stats(const Tensor& loss_rows, const Tensor& argmax, const Tensor& labels,
                    const Tensor& weights, int64_t period, const Tensor& stats) override {
        cpu::loss_stats(ex_, loss_rows, argmax, labels, weights, period, stats);
    }
    void sum_squares(const Tensor& x, const Tensor& out) override { cpu::sum_squares(ex_, x, out); }
    void clip_scale(const Tensor& norm_sq, float max_norm, const Tensor& scale) override {
        cpu::clip_scale(ex_, norm_sq, max_norm, scale);
    }
    void adamw_step(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                    const AdamWParams& p, const Tensor& grad_scale, const Tensor& value) override {
        cpu::adamw_step(ex_, master, grad, m, v, p, grad_scale, value);
    }
    void argmax_rows(const Tensor& x, const Tensor& out) override { cpu::argmax_rows(ex_, x, out); }
    void sample_rows(const Tensor& logits, const SampleParams& p, const Tensor& uniforms,
                     const Tensor& out) override {
        cpu::sample_rows(ex_, logits, p, uniforms, out);
    }
    void dyn_conv_fwd(const Tensor& x, const Tensor& base, const Tensor& delta, int64_t half,
                      int64_t block_size, const Tensor& y) override {
        cpu::dyn_conv_fwd(ex_, x, base, delta, half, block_size, y);
    }
    void dyn_conv_bwd(const Tensor& dy, const Tensor& x, const Tensor& base, const Tensor& delta,
                      int64_t half, int64_t block_size, const Tensor& dx, const Tensor& dbase,
                      const Tensor& ddelta) override {
        cpu::dyn_conv_bwd(ex_, dy, x, base, delta, half, block_size, dx, dbase, ddelta);
    }
    void selector_scores_fwd(const Tensor& z, const Tensor& pred, const Tensor& cand,
                             const Tensor& a, const Tensor& bc, const Tensor& out) override {
        cpu::selector_scores_fwd(ex_, z, pred, cand, a, bc, out);
    }
    void selector_scores_bwd(const Tensor& dscores, const Tensor& z, const Tensor& pred,
                             const Tensor& cand, const Tensor& a, const Tensor& bc,
                             const Tensor& dz, const Tensor& da, const Tensor& dbc) override {
        cpu::selector_scores_bwd(ex_, dscores, z, pred, cand, a, bc, dz, da, dbc);
    }
    void topk_rows(const Tensor& x, const Tensor& values, const Tensor& indices) override {
        cpu::topk_rows(ex_, x, values, indices);
    }
    void selector_inject(const Tensor& logits, const Tensor& labels, const Tensor& values,
                         const Tensor& ids, const Tensor& label_pos, const Tensor& hit) override {
        cpu::selector_inject(ex_, logits, labels, values, ids, label_pos, hit);
    }
    void selector_ce(const SelectorCeArgs& a) override { cpu::selector_ce(ex_, a); }
    void selector_stats(const Tensor& loss_rows, const Tensor& pick, const Tensor& label_pos,
                        const Tensor& hit, const Tensor& weights, int64_t block,
                        const Tensor& stats) override {
        cpu::selector_stats(ex_, loss_rows, pick, label_pos, hit, weights, block, stats);
    }
    void selector_unary_bwd(const Tensor& dvalues, const Tensor& ids, const Tensor& w,
                            const Tensor& out) override {
        cpu::selector_unary_bwd(ex_, dvalues, ids, w, out);
    }

  private:
    static void check_transfer(const Tensor& dst, const Tensor& src, const char* op) {
        DF_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(),
                 "{}: dst {} and src {} must have the same dtype and element count", op,
                 dst.describe(), src.describe());
    }

    cpu::ThreadPool pool_;
    cpu::Exec ex_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
    return std::make_unique<CpuBackend>(threads);
}

}  // namespace dflash
