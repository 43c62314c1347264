// Rng: an explicit, seedable, serialisable random stream (splitmix64). No generator is global:
// each user owns one, and its whole state is one integer, so a checkpoint can store and restore
// it exactly. Tested by tests/core/tensor_test.cpp.
#pragma once

#include <cmath>
#include <cstdint>

namespace dflash {

class Rng {
  public:
    explicit Rng(uint64_t seed = 0) : state_(seed) {}

    uint64_t state() const { return state_; }
    void set_state(uint64_t s) { state_ = s; }

    // An independent stream derived from this seed and a label (worker id, layer index, ...).
    Rng fork(uint64_t label) const { return Rng(mix(state_ ^ mix(label + 0x51ed27u))); }

    uint64_t next_u64() {
        state_ += 0x9e3779b97f4a7c15ull;
        return mix(state_);
    }
    // Uniform in [0, 1) with 24 bits of precision.
    float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
    double uniform_f64() {
        return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
    }
    // Uniform integer in [0, n).
    uint64_t below(uint64_t n) { return n == 0 ? 0 : next_u64() % n; }
    // Moves the stream on by n draws of next_u64 (splitmix64 is a counter): the state that many
    // calls would leave, at once. normal() draws two.
    void skip(uint64_t n) { state_ += n * 0x9e3779b97f4a7c15ull; }
    // Standard normal (Box-Muller; one value per call, deterministic).
    float normal() {
        const double u1 =
            (static_cast<double>(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
        const double u2 = uniform_f64();
        return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                                  std::cos(6.283185307179586 * u2));
    }

  private:
    static uint64_t mix(uint64_t z) {
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    uint64_t state_;
};

// v[i] = std * rng.normal() for i in [0, n): the values, and the state left in rng, of n calls
// in a row, computed by up to `threads` threads (0: one per core) over disjoint ranges (each
// starting its own copy of the stream where the sequence would be: Rng::skip), so the result does
// not depend on the thread count. Tested by tests/core/tensor_test.cpp.
void fill_normal(Rng& rng, float* v, int64_t n, float std, int threads = 0);

}  // namespace dflash
