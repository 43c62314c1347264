// CUDA selector loss family (backend/op_list.h: selector_inject, selector_ce, selector_stats,
// selector_unary_bwd): checks and dispatch; every tensor f32 / i32 as on the CPU except the LM head
// of selector_unary_bwd (bf16). Tested by tests/cuda/selector_loss_cuda_test.cpp.
#include "backend/cuda/kernels/selector_loss.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {

void selector_inject(const Exec& ex, const Tensor& logits, const Tensor& labels,
                     const Tensor& values, const Tensor& ids, const Tensor& label_pos,
                     const Tensor& hit) {
    constexpr const char* op = "selector_inject";
    for (const auto& [t, name] :
         {std::pair{&logits, "logits"}, std::pair{&labels, "labels"}, std::pair{&values, "values"},
          std::pair{&ids, "ids"}, std::pair{&label_pos, "label_pos"}, std::pair{&hit, "hit"}})
        check_device(ex, *t, op, name);
    const SelectorLossDims d =
        check_selector_inject_shapes(logits, labels, values, ids, label_pos, hit);
    kernels::selector_inject(logits.f32(), labels.i32(), values.f32(), ids.i32(), label_pos.i32(),
                             hit.i32(), d.R, logits.dim(1), d.K, ex.stream);
}

void selector_ce(const Exec& ex, const SelectorCeArgs& a) {
    constexpr const char* op = "selector_ce";
    for (const auto& [t, name] :
         {std::pair{&a.values, "values"}, std::pair{&a.pair, "pair"},
          std::pair{&a.label_pos, "label_pos"}, std::pair{&a.weights, "weights"},
          std::pair{&a.grad_weights, "grad_weights"}, std::pair{&a.loss_rows, "loss_rows"},
          std::pair{&a.pick, "pick"}, std::pair{&a.dvalues, "dvalues"},
          std::pair{&a.dpair, "dpair"}})
        if (!t->empty()) check_device(ex, *t, op, name);
    const SelectorLossDims d = check_selector_ce_shapes(a);
    const bool grads = !a.grad_weights.empty();
    kernels::SelectorCeLaunch l{};
    l.values = a.values.f32();
    l.pair = a.pair.f32();
    l.label_pos = a.label_pos.i32();
    l.weights = a.weights.f32();
    l.grad_weights = grads ? a.grad_weights.f32() : nullptr;
    l.multiplier = a.multiplier;
    l.softcap = a.softcap;
    l.loss_rows = a.loss_rows.f32();
    l.pick = a.pick.i32();
    l.dvalues = grads ? a.dvalues.f32() : nullptr;
    l.dpair = grads ? a.dpair.f32() : nullptr;
    l.R = d.R;
    l.K = d.K;
    kernels::selector_ce(l, ex.stream);
}

void selector_stats(const Exec& ex, const Tensor& loss_rows, const Tensor& pick,
                    const Tensor& label_pos, const Tensor& hit, const Tensor& weights,
                    int64_t block, const Tensor& stats) {
    constexpr const char* op = "selector_stats";
    for (const auto& [t, name] : {std::pair{&loss_rows, "loss_rows"}, std::pair{&pick, "pick"},
                                  std::pair{&label_pos, "label_pos"}, std::pair{&hit, "hit"},
                                  std::pair{&weights, "weights"}, std::pair{&stats, "stats"}})
        check_device(ex, *t, op, name);
    const int64_t R =
        check_selector_stats_shapes(loss_rows, pick, label_pos, hit, weights, block, stats);
    DF_CHECK(block <= kernels::kSelectorStatsMaxBlock, "{}: block {} is larger than {}", op, block,
             kernels::kSelectorStatsMaxBlock);
    kernels::selector_stats(loss_rows.f32(), pick.i32(), label_pos.i32(), hit.i32(), weights.f32(),
                            R, block, stats.f32(), ex.stream);
}

void selector_unary_bwd(const Exec& ex, const Tensor& dvalues, const Tensor& ids, const Tensor& w,
                        const Tensor& out) {
    constexpr const char* op = "selector_unary_bwd";
    check_tensor(ex, dvalues, DType::f32, op, "dvalues");
    check_tensor(ex, ids, DType::i32, op, "ids");
    check_tensor(ex, w, DType::bf16, op, "w");
    check_tensor(ex, out, DType::f32, op, "out");
    const SelectorLossDims d = check_selector_unary_bwd_shapes(dvalues, ids, w, out);
    kernels::selector_unary_bwd(dvalues.f32(), ids.i32(), static_cast<const uint16_t*>(w.data()),
                                out.f32(), d.R, d.K, w.dim(0), w.dim(1), ex.stream);
}

}  // namespace dflash::cuda
