// The planning backend: every op and transfer does nothing, so step code can run once against a
// planning Workspace to measure the memory it takes (backend/workspace.h). It reports the real
// backend's device and compute dtype so the dry run takes exactly what a real step takes.
// Tested by tests/backend/workspace_test.cpp and every model test that plans a step.
#include "backend/backend.h"

namespace dflash {
namespace {

class PlanningBackend final : public Backend {
  public:
    explicit PlanningBackend(const Backend& real)
        : name_("planning(" + real.name() + ")"),
          device_(real.device()),
          dtype_(real.compute_dtype()),
          lm_head_real_(real) {}
    std::string name() const override { return name_; }
    DeviceRef device() const override { return device_; }
    DType compute_dtype() const override { return dtype_; }

    Buffer allocate(size_t) override { refuse("allocate"); }
    Buffer allocate_host(size_t) override { refuse("allocate_host"); }
    void upload(const Tensor&, const Tensor&) override {}
    void download(const Tensor&, const Tensor&) override {}
    void copy(const Tensor&, const Tensor&) override {}
    void copy_columns(const Tensor&, int64_t, const Tensor&) override {}
    void fill(const Tensor&, float) override {}
    void write_rows(const Tensor&, const Tensor&, const Tensor&) override {}
    void synchronize() override {}
    void gemm(const Tensor&, bool, const Tensor&, bool, const Tensor&, float, float) override {}
    void embedding_fwd(const Tensor&, const Tensor&, const Tensor&) override {}
    void embedding_bwd(const Tensor&, const Tensor&, const Tensor&) override {}
    void rmsnorm_fwd(const Tensor&, const Tensor&, float, const Tensor&, const Tensor&) override {}
    void rmsnorm_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     const Tensor&) override {}
    void rope_fwd(const Tensor&, const Tensor&, const Tensor&) override {}
    void rope_bwd(const Tensor&, const Tensor&, const Tensor&) override {}
    void attention_fwd(const Tensor&, const Tensor&, const Tensor&, const AttnMask&, const Tensor&,
                       const Tensor&) override {}
    void attention_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const Tensor&, const AttnMask&, const Tensor&, const Tensor&,
                       const Tensor&) override {}
    void swiglu_fwd(const Tensor&, const Tensor&, const Tensor&) override {}
    void swiglu_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                    const Tensor&) override {}
    void add_inplace(const Tensor&, const Tensor&, float) override {}
    void scale_inplace(const Tensor&, float) override {}
    void add_row_bias(const Tensor&, const Tensor&) override {}
    void lm_head_ce(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float, int64_t,
                    const LmHeadCeOut&) override {}
    int64_t lm_head_ce_workspace(int64_t rows, int64_t dim, int64_t vocab,
                                 int64_t chunk) const override {
        return lm_head_real_.lm_head_ce_workspace(rows, dim, vocab, chunk);
    }
    void lm_head_kl(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float, int64_t,
                    const LmHeadKlOut&) override {}
    int64_t lm_head_kl_workspace(int64_t rows, int64_t dim, int64_t vocab,
                                 int64_t chunk) const override {
        return lm_head_real_.lm_head_kl_workspace(rows, dim, vocab, chunk);
    }
    void loss_stats(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                    const Tensor&) override {}
    void sum_squares(const Tensor&, const Tensor&) override {}
    void clip_scale(const Tensor&, float, const Tensor&) override {}
    void adamw_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamWParams&,
                    const Tensor&, const Tensor&) override {}
    void argmax_rows(const Tensor&, const Tensor&) override {}
    void sample_rows(const Tensor&, const SampleParams&, const Tensor&, const Tensor&) override {}
    void dyn_conv_fwd(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t,
                      const Tensor&) override {}
    void dyn_conv_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t,
                      const Tensor&, const Tensor&, const Tensor&) override {}
    void selector_scores_fwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&) override {}
    void selector_scores_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&) override {}
    void topk_rows(const Tensor&, const Tensor&, const Tensor&) override {}
    void selector_inject(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&) override {}
    void selector_ce(const SelectorCeArgs&) override {}
    void selector_stats(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        int64_t, const Tensor&) override {}
    void selector_unary_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}

  private:
    [[noreturn]] void refuse(const char* what) const {
        DF_ASSERT(false, "{}: the planning backend cannot {} (allocate before planning a step)",
                  name_, what);
        __builtin_unreachable();
    }

    std::string name_;
    DeviceRef device_;
    DType dtype_;
    const Backend& lm_head_real_;
};

}  // namespace

std::unique_ptr<Backend> make_planning_backend(const Backend& real) {
    return std::make_unique<PlanningBackend>(real);
}

}  // namespace dflash
