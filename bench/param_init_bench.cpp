// Initialising a model's random weights: ParamSet::init_random (fill_normal_hash on the backend's
// device and threads) against what it replaced, normals drawn one after another from an Rng on
// one host thread (Box-Muller with the C library's log and cos) and then written into the set.
// Usage: param_init_bench [--params N (default 1e9)] [--threads N] [--backend cpu|cuda]
//        [--skip-host]. Wall seconds and CPU seconds (all threads) of each, one JSON object per
// case on stdout. A 1e9-parameter set needs 4 GB (f32) on the device and, for the host path,
// 4 GB more on the host per tensor of the layout below (8 tensors of N/8).
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "backend/device_tensor.h"
#include "core/rng.h"
#include "model/params.h"

namespace dflash {
namespace {

struct Timing {
    double wall = 0, cpu = 0;
};

template <class Fn>
Timing timed(Backend& be, Fn&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    fn();
    be.synchronize();
    return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
            static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC};
}

int run(int argc, char** argv) {
    double params = 1e9;
    int threads = 1;
    std::string backend = "cpu";
    bool host = true;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--params" && i + 1 < argc) {
            params = std::atof(argv[++i]);
        } else if (a == "--threads" && i + 1 < argc) {
            threads = std::atoi(argv[++i]);
        } else if (a == "--backend" && i + 1 < argc) {
            backend = argv[++i];
        } else if (a == "--skip-host") {
            host = false;
        } else {
            std::fprintf(stderr,
                         "usage: param_init_bench [--params N] [--threads N] [--backend cpu|cuda] "
                         "[--skip-host]\n");
            return 2;
        }
    }
    const auto be = make_backend(resolve_backend(backend), 0, threads);
    // Eight [N/8/2048, 2048] weight matrices, the shape of a drafter's linear layers.
    const auto rows = static_cast<int64_t>(params / 8 / 2048);
    std::vector<TensorSpec> specs;
    for (int k = 0; k < 8; ++k)
        specs.push_back(
            {"model.layers." + std::to_string(k) + ".mlp.up_proj.weight", {rows, 2048}});
    ParamSet ps(*be, specs);
    const double n = static_cast<double>(ps.numel());
    std::fprintf(stderr, "%s, %.3g parameters\n", be->name().c_str(), n);
    auto report = [&](const char* method, const Timing& t) {
        std::fprintf(stderr, "%-28s wall %8.2f s  cpu %8.2f s  (%.1f ns cpu / parameter)\n", method,
                     t.wall, t.cpu, 1e9 * t.cpu / n);
        const nlohmann::json j = {{"method", method}, {"backend", be->name()}, {"threads", threads},
                                  {"params", n},      {"wall_s", t.wall},      {"cpu_s", t.cpu}};
        std::printf("%s\n", j.dump().c_str());
        std::fflush(stdout);
    };
    if (host)
        report("host Rng + write_f32", timed(*be, [&] {
                   Rng rng(1);
                   for (const Param& p : ps.params()) {
                       HostTensor h(p.shape);
                       fill_normal(rng, h.f32(), h.numel(), 0.02f, 1);
                       ps.write_f32(p.name, h.view());
                   }
               }));
    report("init_random (fill_normal_hash)", timed(*be, [&] { ps.init_random(1, 0.02f); }));
    return 0;
}

}  // namespace
}  // namespace dflash

int main(int argc, char** argv) {
    return dflash::run(argc, argv);
}
