// Learning-rate schedules. Tested by tests/train/optimizer_test.cpp.
#include "train/schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace dflash::train {

ScheduleKind parse_schedule_kind(const std::string& name) {
    if (name == "cosine") return ScheduleKind::cosine;
    if (name == "linear") return ScheduleKind::linear;
    if (name == "constant") return ScheduleKind::constant;
    DF_FAIL("train.schedule='{}' is not a schedule; expected cosine, linear or constant", name);
}

LrSchedule::LrSchedule(ScheduleKind kind, double peak_lr, int64_t total_steps, double warmup_ratio)
    : kind_(kind), peak_(peak_lr), total_(total_steps) {
    DF_CHECK(total_steps >= 1, "a schedule needs at least 1 step, got total_steps={}", total_steps);
    DF_CHECK(warmup_ratio >= 0 && warmup_ratio <= 1,
             "warmup_ratio={} must lie in [0, 1] (a fraction of the total steps)", warmup_ratio);
    // Rounded up so that any positive ratio gives at least one warm-up step; the slack keeps
    // 0.04 * 50 (= 2.0000000000000004 in binary) at 2.
    warmup_ =
        static_cast<int64_t>(std::ceil(warmup_ratio * static_cast<double>(total_steps) - 1e-9));
    if (warmup_ > total_) warmup_ = total_;
}

double LrSchedule::lr(int64_t step) const {
    DF_ASSERT(step >= 1, "optimizer steps are 1-based, got {}", step);
    if (step <= warmup_) return peak_ * static_cast<double>(step) / static_cast<double>(warmup_);
    if (kind_ == ScheduleKind::constant) return peak_;
    const double span = static_cast<double>(total_ - warmup_);
    const double p = std::min(1.0, static_cast<double>(step - warmup_ - 1) / span);
    if (kind_ == ScheduleKind::linear) return peak_ * (1.0 - p);
    return peak_ * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

}  // namespace dflash::train
