// The device collectives the trainer uses (Backend::make_device_collectives: NCCL on CUDA), one
// worker thread per GPU of this machine as the trainer runs them, on f32 buffers of gradient
// sizes: the all-reduce of the unsharded exchange and the reduce-scatter + all-gather pair of the
// sharded one (train.shard_optimizer_state). Prints, per size, the median time of one op (after
// warm-up; each timed call ends with a device wait), the algorithm bandwidth (bytes / time) and
// the bus bandwidth as nccl-tests defines it (all-reduce: x 2(n-1)/n; reduce-scatter and
// all-gather: x (n-1)/n), to compare with the NCCL ceiling of docs/performance.md (311-360
// GB/s on 4 H200s). One JSON object per case on stdout, the table on stderr.
// Usage: collectives_bench [--gpus N] [--mib 64,256,1024,4000] [--library libnccl.so.2].
// With one GPU the ops are the identity and the bus bandwidth is n/a; without a GPU it says so.
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend_factory.h"
#include "bench_util.h"
#include "comm/in_process.h"
#include "core/error.h"

namespace dflash {
namespace {

struct Options {
    int gpus = 0;  // 0: every visible GPU
    std::vector<double> mib = {64, 256, 1024, 4000};
    std::string library = "libnccl.so.2";
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool has_value = i + 1 < argc;
        if (a == "--gpus" && has_value) {
            o.gpus = std::stoi(argv[++i]);
        } else if (a == "--library" && has_value) {
            o.library = argv[++i];
        } else if (a == "--mib" && has_value) {
            o.mib.clear();
            std::string list = argv[++i];
            for (size_t p = 0; p < list.size();) {
                const size_t q = list.find(',', p);
                o.mib.push_back(std::stod(list.substr(p, q - p)));
                p = q == std::string::npos ? list.size() : q + 1;
            }
        } else {
            DF_FAIL("collectives_bench: unknown argument '{}' (--gpus N, --mib A,B, --library L)",
                    a);
        }
    }
    return o;
}

struct Case {
    const char* op;
    double bus_factor;  // x (n-1)/n
};

int run(const Options& o) {
    const int visible = cuda_device_count();
    if (visible == 0) {
        std::fprintf(stderr, "collectives_bench: no CUDA device; nothing to time\n");
        return 0;
    }
    const int n = o.gpus > 0 ? std::min(o.gpus, visible) : visible;
    InProcessGroup group(n);
    // [size][case] seconds, from rank 0 (every rank waits for the same collectives).
    std::vector<std::vector<double>> seconds(o.mib.size(), std::vector<double>(2, 0.0));
    std::string describe;
    std::vector<std::string> errors(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
            try {
                auto be = make_backend(DeviceKind::cuda, r, 1);
                auto coll = be->make_device_collectives(group.rank(r), {o.library, 600});
                if (r == 0) describe = coll->describe();
                for (size_t s = 0; s < o.mib.size(); ++s) {
                    const int64_t chunk =
                        static_cast<int64_t>(o.mib[s] * (1 << 20) / 4 / n) / 64 * 64;
                    DeviceTensor buf(*be, {chunk * n}, DType::f32);
                    be->fill(buf.view(), 1.0f / static_cast<float>(n) + static_cast<float>(r));
                    const double ar =
                        bench::median_seconds(*be, 3, 10, [&] { coll->sum(buf.view()); });
                    const double pair = bench::median_seconds(*be, 3, 10, [&] {
                        coll->reduce_scatter(buf.view(), chunk);
                        coll->all_gather(buf.view(), chunk);
                    });
                    if (r == 0) seconds[s] = {ar, pair};
                }
            } catch (const std::exception& e) {
                errors[static_cast<size_t>(r)] = e.what();
                group.abort(e.what());
            }
        });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r)
        if (!errors[static_cast<size_t>(r)].empty()) {
            std::fprintf(stderr, "collectives_bench: rank %d: %s\n", r,
                         errors[static_cast<size_t>(r)].c_str());
            return 1;
        }
    std::fprintf(stderr, "%s, %d GPU(s), one worker thread each\n", describe.c_str(), n);
    std::fprintf(stderr, "%-28s %10s %10s %12s %12s\n", "op", "MiB", "ms", "algbw GB/s",
                 "busbw GB/s");
    const double frac = n > 1 ? static_cast<double>(n - 1) / n : 0.0;
    const Case cases[2] = {{"all-reduce", 2 * frac}, {"reduce-scatter + all-gather", 2 * frac}};
    for (size_t s = 0; s < o.mib.size(); ++s) {
        const double bytes =
            static_cast<double>(static_cast<int64_t>(o.mib[s] * (1 << 20) / 4 / n) / 64 * 64) * n *
            4;
        for (int c = 0; c < 2; ++c) {
            const double t = seconds[s][static_cast<size_t>(c)];
            const double alg = bytes / t / 1e9;
            const double bus = alg * cases[c].bus_factor;
            std::fprintf(stderr, "%-28s %10.0f %10.3f %12.1f %12s\n", cases[c].op,
                         bytes / (1 << 20), t * 1e3, alg,
                         n > 1 ? fmt::format("{:.1f}", bus).c_str() : "n/a");
            bench::emit({{"bench", "device_collectives"},
                         {"op", cases[c].op},
                         {"gpus", n},
                         {"bytes", bytes},
                         {"ms", t * 1e3},
                         {"algbw_GBps", alg},
                         {"busbw_GBps", n > 1 ? nlohmann::json(bus) : nlohmann::json()},
                         {"library", describe}});
        }
    }
    return 0;
}

}  // namespace
}  // namespace dflash

int main(int argc, char** argv) {
    try {
        return dflash::run(dflash::parse(argc, argv));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "collectives_bench: %s\n", e.what());
        return 1;
    }
}
