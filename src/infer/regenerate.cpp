// Response regeneration with the target. Tested by tests/infer/regenerate_test.cpp.
#include "infer/regenerate.h"

#include <atomic>
#include <chrono>
#include <mutex>

#include "core/worker_pool.h"
#include "data/manifest.h"
#include "data/shard.h"

namespace dflash {

std::vector<Encoded> regenerate_responses(const TargetModel& target,
                                          const std::vector<std::vector<int32_t>>& prompts,
                                          const RegenerateOptions& opt, const Logger& log,
                                          RegenerateStats* stats) {
    const int workers = std::max(1, opt.workers);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Encoded> out(prompts.size());
    std::atomic<int64_t> done{0}, response_tokens{0};
    std::mutex progress_mutex;
    auto last_report = t0;
    // Prompt i goes to worker i % workers; its seed depends on i alone.
    auto one = [&](SpeculativeEngine& engine, size_t i) {
        GenerateOptions g = opt.generate;
        g.seed = opt.generate.seed + i;
        const GenerateResult r = engine.generate(prompts[i], g);
        Encoded& e = out[i];
        e.tokens = prompts[i];
        e.loss_mask.assign(prompts[i].size(), 0);
        e.tokens.insert(e.tokens.end(), r.tokens.begin(), r.tokens.end());
        e.loss_mask.resize(e.tokens.size(), 1);
        response_tokens += static_cast<int64_t>(r.tokens.size());
        const int64_t n = ++done;
        std::lock_guard lock(progress_mutex);
        const auto now = std::chrono::steady_clock::now();
        if (std::chrono::duration<double>(now - last_report).count() >= opt.progress_interval_s) {
            last_report = now;
            const double s = std::chrono::duration<double>(now - t0).count();
            log.info("regenerated {}/{} responses ({:.0f} tokens/s)", n, prompts.size(),
                     static_cast<double>(response_tokens.load()) / s);
        }
    };
    if (target.backend().device().kind != DeviceKind::cpu) {
        // A GPU decodes one request at a time from the thread that drives it.
        SpeculativeEngine engine(target, nullptr, target.backend());
        for (size_t i = 0; i < prompts.size(); ++i) one(engine, i);
    } else {
        std::vector<std::string> devices;
        for (int w = 0; w < workers; ++w) devices.push_back("cpu:" + std::to_string(w));
        WorkerPool pool(workers, devices, log);
        pool.run([&](WorkerContext& ctx) {
            auto be = make_cpu_backend(opt.threads_per_worker);
            SpeculativeEngine engine(target, nullptr, *be);
            for (size_t i = ctx.id(); i < prompts.size(); i += workers) {
                if (ctx.stop_requested()) return;
                ctx.set_phase("prompt " + std::to_string(i));
                one(engine, i);
            }
        });
    }
    if (stats) {
        stats->samples = static_cast<int64_t>(out.size());
        stats->prompt_tokens = 0;
        for (const auto& p : prompts) stats->prompt_tokens += static_cast<int64_t>(p.size());
        stats->response_tokens = response_tokens.load();
        stats->seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return out;
}

void write_samples_shard(const std::filesystem::path& dir, const std::vector<Encoded>& samples,
                         const Tokenizer& tok, const std::vector<std::string>& inputs) {
    std::filesystem::create_directories(dir);
    const auto path = dir / "regenerated-00000.dfshard";
    ShardWriter w(path, tok.name(), tok.vocab_size());
    DatasetManifest m;
    m.tokenizer = tok.name();
    m.vocab_size = tok.vocab_size();
    m.inputs = inputs;
    for (const auto& s : samples) {
        w.add(s);
        m.records += 1;
        m.samples += 1;
        m.tokens += static_cast<int64_t>(s.tokens.size());
        for (uint8_t b : s.loss_mask) m.response_tokens += b;
    }
    w.finish();
    m.add_shard(path, w.info());
    write_manifest(dir, m);
}

}  // namespace dflash
