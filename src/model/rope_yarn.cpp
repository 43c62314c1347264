// YaRN inverse frequencies and attention factor. Tested by tests/model/moe_forward_test.cpp.
#include "model/rope_yarn.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace dflash {

namespace {

// The dimension at which a frequency completes `rotations` turns over the original context.
double correction_dim(double rotations, int64_t dim, double base, double context) {
    return static_cast<double>(dim) * std::log(context / (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(base));
}

}  // namespace

std::vector<float> yarn_inv_freq(const RopeConfig& rope, int64_t head_dim) {
    const RopeScaling& s = rope.scaling;
    DF_ASSERT(s.type == RopeScalingType::yarn, "yarn_inv_freq of another rope type");
    DF_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim={} must be positive and even",
             head_dim);
    DF_CHECK(rope.theta > 1.0 && s.factor > 0 && s.original_max_position > 0,
             "rope (yarn): rope_theta={}, factor={} and original_max_position_embeddings={} must "
             "be positive (theta > 1)",
             rope.theta, s.factor, s.original_max_position);
    const int64_t half = head_dim / 2;
    const double context = static_cast<double>(s.original_max_position);
    double low = correction_dim(s.beta_fast, head_dim, rope.theta, context);
    double high = correction_dim(s.beta_slow, head_dim, rope.theta, context);
    if (s.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(head_dim - 1));
    if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
    const float base = static_cast<float>(rope.theta);
    const float factor = static_cast<float>(s.factor);
    const float low_f = static_cast<float>(low), width = static_cast<float>(high - low);
    std::vector<float> inv(half);
    for (int64_t i = 0; i < half; ++i) {
        const float pos = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(head_dim));
        const float extrapolated = 1.0f / pos;
        const float interpolated = 1.0f / (factor * pos);
        // Dimensions below `low` keep their frequency (extrapolate), those above `high` are
        // interpolated fully; the ramp blends the ones between.
        const float ramp = std::clamp((static_cast<float>(i) - low_f) / width, 0.0f, 1.0f);
        const float keep = 1.0f - ramp;
        inv[i] = interpolated * (1.0f - keep) + extrapolated * keep;
    }
    return inv;
}

double rope_attention_factor(const RopeScaling& s) {
    if (s.type != RopeScalingType::yarn) return 1.0;
    if (s.attention_factor > 0) return s.attention_factor;
    return s.factor <= 1.0 ? 1.0 : 0.1 * std::log(s.factor) + 1.0;
}

}  // namespace dflash
