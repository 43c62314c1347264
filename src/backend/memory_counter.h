// Device-memory counters of one backend (Backend::memory_counters): the bytes of its live
// allocate() buffers now and the most since it was made or since reset_peak. The buffers' free
// functions hold the counter by shared_ptr, since a buffer may outlive its backend. Read by
// bench/train_step_bench (peak device memory per configuration). Tested by
// tests/backend/memory_counter_test.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace dflash {

struct MemoryCounters {
    int64_t live_bytes = 0;
    int64_t peak_bytes = 0;
};

class MemoryCounter {
  public:
    void add(size_t bytes) {
        const int64_t now =
            live_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
        int64_t peak = peak_.load();
        while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
        }
    }
    void sub(size_t bytes) { live_.fetch_sub(static_cast<int64_t>(bytes)); }
    MemoryCounters read() const { return {live_.load(), peak_.load()}; }
    void reset_peak() { peak_.store(live_.load()); }

  private:
    std::atomic<int64_t> live_{0}, peak_{0};
};

}  // namespace dflash
