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
    void synchronize() override {}
    // Every op of backend/op_list.h does nothing.
#define DFLASH_OP(name, params, args) \
    void name params override {}
#include "backend/op_list.h"

    int64_t lm_head_ce_workspace(int64_t rows, int64_t dim, int64_t vocab,
                                 int64_t chunk) const override {
        return lm_head_real_.lm_head_ce_workspace(rows, dim, vocab, chunk);
    }
    int64_t lm_head_kl_workspace(int64_t rows, int64_t dim, int64_t vocab,
                                 int64_t chunk) const override {
        return lm_head_real_.lm_head_kl_workspace(rows, dim, vocab, chunk);
    }

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
