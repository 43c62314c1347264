// Finite-difference gradient checks shared by the op and model tests (tests/ops/*_test.cpp,
// tests/model/*_test.cpp): 4-point central differences, compared with an analytic gradient.
// Checked itself by tests/ops/finite_diff_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"

namespace dflash::test {

// A scalar function of the inputs, e.g. loss(x) = sum(dy * op(x)) accumulated in double.
using ScalarFn = std::function<double(const std::vector<double>&)>;
using ScalarFnF32 = std::function<double(const std::vector<float>&)>;

// d f / d x[i] ≈ (-f(x+2h) + 8 f(x+h) - 8 f(x-h) + f(x-2h)) / (12 h), one coordinate at a time
// (4 * x.size() evaluations). Truncation error is O(h^4).
std::vector<double> fd_gradient(const ScalarFn& f, const std::vector<double>& x, double h);

// The same on a float32 function: the perturbed input is rounded to float, so besides the float
// rounding of f itself the step carries an error of about ulp(x[i]) / h. Pick h around 1e-2 for
// O(1) inputs and expect agreement to ~1e-3, not 1e-6.
std::vector<double> fd_gradient_f32(const ScalarFnF32& f, const std::vector<float>& x, double h);

// The same stencil on one float inside a model (a weight): sets `w` to each perturbed value, calls
// `loss`, and restores `w`. The perturbations are rounded to float like the model's own weights.
double fd_derivative_in_place(float& w, const std::function<double()>& loss, float h);

// The elements of a weight tensor worth a finite-difference check: the `top` of largest
// |grad[i]| (where a wrong gradient shows most) and `random` more drawn from `rng`, no repeats.
std::vector<int64_t> fd_check_indices(const float* grad, int64_t n, int top, int random, Rng& rng);

// Worst disagreement between an analytic and a numerical gradient:
//   max_rel_err = max_i |analytic[i] - numeric[i]| / scale,
//   scale = max(max_j |numeric[j]|, max_j |analytic[j]|, floor).
// Normalising by the gradient's overall scale (not per element) keeps near-zero entries from
// turning round-off into huge relative errors; `floor` guards an all-zero gradient.
struct GradCheck {
    double max_rel_err = 0;
    int64_t worst_index = -1;
    double analytic = 0;  // at worst_index
    double numeric = 0;   // at worst_index
    double scale = 0;
    std::string to_string() const;
};
GradCheck compare_gradients(const std::vector<double>& analytic, const std::vector<double>& numeric,
                            double floor = 1e-6);

}  // namespace dflash::test
