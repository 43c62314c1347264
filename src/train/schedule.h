// Learning-rate schedules (docs/training.md "What a step does"): linear warm-up over warmup_ratio *
// total_steps optimizer steps, then cosine (to 0), linear (to 0) or constant. Tested by
// tests/train/optimizer_test.cpp.
#pragma once

#include <cstdint>
#include <string>

namespace dflash::train {

enum class ScheduleKind { cosine, linear, constant };

// "cosine" | "linear" | "constant"; anything else is an error naming the value.
ScheduleKind parse_schedule_kind(const std::string& name);

class LrSchedule {
  public:
    LrSchedule(ScheduleKind kind, double peak_lr, int64_t total_steps, double warmup_ratio);

    // The learning rate of optimizer step `step` (1-based, step 1 is the first update). Warm-up
    // steps 1..W get peak * step / W, so the first update already moves (HF's schedule gives
    // step 0 a learning rate of 0). Decay: progress p = (step - W - 1) / (total - W) in [0, 1),
    // cosine peak * (1 + cos(pi p)) / 2, linear peak * (1 - p); both reach 0 at step total + 1.
    double lr(int64_t step) const;

    int64_t warmup_steps() const { return warmup_; }
    int64_t total_steps() const { return total_; }

  private:
    ScheduleKind kind_;
    double peak_;
    int64_t total_;
    int64_t warmup_;
};

}  // namespace dflash::train
