// How far a model's float32 function moves when every weight moves by about one bf16 rounding.
// A bf16 backend rounds weights and activations at every op, so it cannot come closer to the
// float32 reference than the reference's own sensitivity to perturbations of that size; where a
// random model is ill-conditioned (a small q/k vector L2-normalised, a delta rule whose state
// amplifies its inputs, weights of std 0.5), a fixed tolerance calibrated on well-conditioned
// dense models is the wrong bound. Tests that compare CUDA with the CPU on such models measure
// this sensitivity on the CPU and bound the CUDA distance by a multiple of it (and never below
// the fixed tolerance), so a real bug, which moves the output far more than rounding does, still
// fails.
#pragma once

#include <cstdint>

#include "model/params.h"

namespace dflash::test {

// Multiplies every element of every parameter of `ps` by (1 + rel * u), u uniform in [-1, 1),
// drawn from a generator seeded with `seed`. One bf16 rounding moves a value by at most 2^-9
// relative (half its unit roundoff 2^-8); rel = 2^-8 is a generous stand-in for it.
void perturb_relative(ParamSet& ps, uint64_t seed, double rel);

}  // namespace dflash::test
