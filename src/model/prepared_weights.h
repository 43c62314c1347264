// PreparedWeights: a backend's copies of a model's linear weights, looked up by the weight they
// were made from. Drafting multiplies through bf16 copies (Note [bf16 drafting] in
// backend/cpu/bf16_linear.h), the target's decode and verify on the CPU through fp32 panels (Note
// [f32 panels] in backend/cpu/f32_panels.h); every other product reads its weight in place. Tested
// by tests/infer/spec_decode_test.cpp and tests/ops/bf16_linear_test.cpp.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace dflash {

// Which precision a CPU draft's products run in (infer.cpu_draft_precision).
enum class DraftPrecision {
    auto_,  // bf16 where the CPU has AMX-BF16 or AVX-512 (bf16_linear.h), else f32
    f32,    // the drafter's own fp32 forward
    bf16,   // bf16; an error on a CPU with neither
};
DraftPrecision parse_draft_precision(const std::string& s);
const char* to_string(DraftPrecision p);

// Which copy of a weight PreparedWeights holds: bf16 for drafting (Backend::prepare_bf16_weight)
// or fp32 panels for the target's decode and verify (Backend::prepare_f32_weight).
enum class WeightCopy { bf16, f32 };

class PreparedWeights {
  public:
    PreparedWeights() = default;
    // Copies of `weights` made by the backend (`copy`), from their values now: whoever changes
    // the weights afterwards makes a new set. Weights the backend gives no copy for are read in
    // place (count() tells how many have one).
    PreparedWeights(Backend& be, const std::vector<Tensor>& weights,
                    WeightCopy copy = WeightCopy::bf16);
    // The copy made from w, or null.
    const PreparedWeight* find(const Tensor& w) const;
    size_t count() const { return copies_.size(); }

  private:
    std::map<const void*, std::unique_ptr<PreparedWeight>> copies_;
};

// y = x · Wᵀ + beta * y, through W's copy in `prepared` when there is one.
void linear(Backend& be, const PreparedWeights* prepared, const Tensor& x, const Tensor& w,
            const Tensor& y, float beta = 0.0f);

}  // namespace dflash
