// 4-point central finite differences (see finite_diff.h).
#include "support/finite_diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dflash::test {
namespace {

constexpr double kOffsets[4] = {-2.0, -1.0, 1.0, 2.0};
constexpr double kWeights[4] = {1.0, -8.0, 8.0, -1.0};

template <typename T, typename Fn>
std::vector<double> central_differences(const Fn& f, const std::vector<T>& x, double h) {
    DF_ASSERT(h > 0, "finite-difference step h={} must be positive", h);
    std::vector<T> xp = x;
    std::vector<double> grad(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        double acc = 0;
        for (int k = 0; k < 4; ++k) {
            xp[i] = static_cast<T>(static_cast<double>(x[i]) + kOffsets[k] * h);
            acc += kWeights[k] * f(xp);
        }
        xp[i] = x[i];
        grad[i] = acc / (12.0 * h);
    }
    return grad;
}

}  // namespace

std::vector<double> fd_gradient(const ScalarFn& f, const std::vector<double>& x, double h) {
    return central_differences(f, x, h);
}

double fd_derivative_in_place(float& w, const std::function<double()>& loss, float h) {
    const float orig = w;
    auto at = [&](float v) {
        w = v;
        return loss();
    };
    const double d =
        (-at(orig + 2 * h) + 8 * at(orig + h) - 8 * at(orig - h) + at(orig - 2 * h)) / (12.0 * h);
    w = orig;
    return d;
}

std::vector<double> fd_gradient_f32(const ScalarFnF32& f, const std::vector<float>& x, double h) {
    return central_differences(f, x, h);
}

std::vector<int64_t> fd_check_indices(const float* grad, int64_t n, int top, int random, Rng& rng) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    const auto k = static_cast<size_t>(std::min<int64_t>(top, n));
    std::partial_sort(
        order.begin(), order.begin() + static_cast<ptrdiff_t>(k), order.end(),
        [&](int64_t a, int64_t b) { return std::fabs(grad[a]) > std::fabs(grad[b]); });
    std::vector<int64_t> out(order.begin(), order.begin() + static_cast<ptrdiff_t>(k));
    for (int r = 0; r < random && static_cast<int64_t>(out.size()) < n;) {
        const auto i = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n)));
        if (std::find(out.begin(), out.end(), i) != out.end()) continue;
        out.push_back(i);
        ++r;
    }
    return out;
}

GradCheck compare_gradients(const std::vector<double>& analytic, const std::vector<double>& numeric,
                            double floor) {
    DF_ASSERT(analytic.size() == numeric.size(), "gradient sizes differ: analytic {} numeric {}",
              analytic.size(), numeric.size());
    GradCheck r;
    r.scale = floor;
    for (size_t i = 0; i < numeric.size(); ++i)
        r.scale = std::max({r.scale, std::fabs(numeric[i]), std::fabs(analytic[i])});
    for (size_t i = 0; i < numeric.size(); ++i) {
        double err = std::fabs(analytic[i] - numeric[i]) / r.scale;
        if (std::isnan(err)) err = INFINITY;
        if (r.worst_index < 0 || err > r.max_rel_err) {
            r.max_rel_err = err;
            r.worst_index = static_cast<int64_t>(i);
            r.analytic = analytic[i];
            r.numeric = numeric[i];
        }
    }
    return r;
}

std::string GradCheck::to_string() const {
    return fmt::format(
        "max_rel_err={:.3e} at [{}]: analytic {:.9g} vs numeric {:.9g} (scale {:.3g})", max_rel_err,
        worst_index, analytic, numeric, scale);
}

}  // namespace dflash::test
