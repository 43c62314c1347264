// The embedded demo pipeline. Tested by tests/cli/demo_slow_test.cpp.
#include "demo/demo.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <thread>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "config/registry.h"
#include "core/atomic_file.h"
#include "core/dir_lock.h"
#include "core/staged_dir.h"
#include "data/local_corpus.h"
#include "data/prepare.h"
#include "infer/prompts.h"
#include "infer/regenerate.h"
#include "infer/stop_tokens.h"
#include "model/drafter.h"
#include "model/target.h"
#include "options/cuda_graphs_options.h"
#include "options/drafter_options.h"
#include "options/infer_options.h"
#include "options/runtime_options.h"
#include "options/training.h"
#include "tokenizer/tokenizer.h"
#include "train/drafter_training.h"
#include "train/pretraining.h"

namespace dflash::demo {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// How much work each stage does. Full: about 5 minutes on 2 cores; quick: under one.
struct Plan {
    size_t corpus_bytes;
    int64_t pretrain_steps;
    int64_t regen_prompts;
    int64_t regen_tokens;
    int64_t drafter_steps;
    int64_t bench_prompts;
    int64_t bench_tokens;
};

Plan plan_for(bool quick) {
    if (quick) return {300'000, 100, 160, 64, 100, 6, 64};
    return {1'000'000, 500, 700, 128, 600, 16, 128};
}

constexpr const char* kMarker = ".dflash-demo";

double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The demo's choices for settings the user left at their defaults (an explicit value wins).
config::Settings with_demo_defaults(const config::Settings& base,
                                    const std::vector<std::pair<std::string, std::string>>& kv) {
    std::vector<config::Assignment> as;
    for (const auto& [key, text] : kv) {
        if (base.source(key) != "default") continue;
        const config::Registry& reg = base.registry();
        const config::Declaration* decl = reg.find(key);
        DF_ASSERT(decl != nullptr, "demo setting {}", key);
        as.push_back({key, reg.parse_text(*decl, text, "demo"), "demo"});
    }
    return base.with(as);
}

// The output directory belongs to the demo (a marker file says so): anything else is refused,
// before the demo creates as much as a lock file in it.
void refuse_foreign_dir(const fs::path& dir) {
    DF_CHECK(!holds_files(dir) || fs::exists(dir / kMarker),
             "'{}' exists and was not made by `dflash demo`; choose another with "
             "--demo.output_dir DIR",
             dir.string());
}

// Stages of an earlier demo run in `dir` are replaced. The caller holds the directory's lock, so
// no other demo is writing there.
void prepare_output_dir(const fs::path& dir) {
    for (const char* stage : {"corpus", "data", "target", "drafter", "bench.json"})
        fs::remove_all(dir / stage);
    fs::create_directories(dir);
    std::ofstream(dir / kMarker) << "made by dflash demo\n";
}

void write_text_jsonl(const fs::path& path, const std::vector<std::string>& docs) {
    std::string text;
    for (const auto& d : docs) text += nlohmann::json{{"text", d}}.dump() + "\n";
    write_text_atomic(path, text);
}

// Held-out prompts (the first 96 bytes of each held-out document), as a prompts JSONL for the
// drafter's periodic evaluation and for the final bench.
void write_prompts_jsonl(const fs::path& path, const std::vector<std::string>& docs, int64_t n) {
    std::string text;
    for (size_t i = 0; i < docs.size() && static_cast<int64_t>(i) < n; ++i)
        text += nlohmann::json{{"prompt", docs[i].substr(0, 96)}}.dump() + "\n";
    write_text_atomic(path, text);
}

// Prompts for regeneration: `n` slices of the training documents, each starting at a line.
std::vector<std::vector<int32_t>> regeneration_prompts(const std::vector<std::string>& docs,
                                                       int64_t n, const Tokenizer& tok,
                                                       uint64_t seed) {
    Rng rng(seed);
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < n; ++i) {
        const std::string& d = docs[rng.below(docs.size())];
        size_t start = rng.below(d.size() / 2 + 1);
        const size_t nl = d.find('\n', start);
        start = nl == std::string::npos ? 0 : nl + 1;
        const size_t len = 48 + rng.below(81);  // 48..128 bytes
        std::string text = d.substr(start, len);
        if (text.size() < 16) text = d.substr(0, len);
        prompts.push_back(encode_text_prompt(tok, text));
    }
    return prompts;
}

void print_stage(std::FILE* out, int i, const char* what) {
    std::fprintf(out, "\n[%d/5] %s\n", i, what);
    std::fflush(out);
}

std::string acc_list(const std::vector<double>& acc) {
    std::string s;
    for (size_t k = 0; k < acc.size(); ++k) s += fmt::format("{}{:.2f}", k ? " " : "", acc[k]);
    return s;
}

// Two generations side by side with their prompts, as a person would run them.
void print_examples(std::FILE* out, const TargetModel& target, const DrafterModel& drafter,
                    Backend& be, const std::vector<Prompt>& prompts, const GenerateOptions& go,
                    const Tokenizer& tok) {
    SpeculativeEngine engine(target, &drafter, be);
    for (size_t i = 0; i < std::min<size_t>(2, prompts.size()); ++i) {
        const auto r = engine.generate(prompts[i].tokens, go);
        std::fprintf(
            out, "\nexample %zu (tau %.2f)\n--- prompt ---\n%s\n--- continuation ---\n%s\n", i + 1,
            r.stats.tau(), tok.decode(std::span(prompts[i].tokens).subspan(1)).c_str(),
            tok.decode(r.tokens).c_str());
    }
}

}  // namespace

std::vector<fs::path> default_corpus_roots() {
    const fs::path src = DFLASH_DEMO_CORPUS_DIR;
    std::vector<fs::path> roots;
    for (const char* sub : {"docs", "src", "tests"})
        if (fs::is_directory(src / sub)) roots.push_back(src / sub);
    return roots;
}

DemoReport run_demo(const DemoOptions& opt, const config::Settings& user_settings,
                    const Logger& log, std::FILE* out) {
    const auto t_start = Clock::now();
    const Plan plan = plan_for(opt.quick);
    DemoReport rep;
    const fs::path dir = opt.output_dir;
    refuse_foreign_dir(dir);
    const DirLock lock = DirLock::acquire(dir, "demo output directory", "dflash demo");
    prepare_output_dir(dir);
    const RuntimeOptions runtime = runtime_options_from_settings(user_settings);
    const uint64_t seed = runtime.seed;
    auto tok = make_byte_tokenizer();

    // 1. Corpus -> token shards.
    print_stage(out, 1, "corpus: the project's own sources and docs, as byte-level tokens");
    const auto roots = opt.corpus_roots.empty() ? default_corpus_roots() : opt.corpus_roots;
    DF_CHECK(
        !roots.empty(),
        "no corpus: the source tree this binary was built from ({}) is gone; pass --corpus DIR "
        "(any directory of text files)",
        DFLASH_DEMO_CORPUS_DIR);
    const auto docs = collect_text_documents(
        roots, {".md", ".h", ".cpp", ".cc", ".hpp", ".txt", ".toml"}, plan.corpus_bytes, 1500);
    DF_CHECK(docs.size() >= 20, "the corpus under {} has only {} documents; pass --corpus DIR",
             roots.front().string(), docs.size());
    const CorpusSplit split = split_heldout(docs, 0.05, seed);
    rep.corpus_documents = static_cast<int64_t>(docs.size());
    for (const auto& d : docs) rep.corpus_bytes += static_cast<int64_t>(d.size());
    fs::create_directories(dir / "corpus");
    write_text_jsonl(dir / "corpus/train.jsonl", split.train);
    write_text_jsonl(dir / "corpus/heldout.jsonl", split.heldout);
    write_prompts_jsonl(dir / "corpus/heldout_prompts.jsonl", split.heldout, plan.bench_prompts);
    for (const char* part : {"train", "heldout"}) {
        PrepareOptions po;
        po.inputs = {dir / "corpus" / (std::string(part) + ".jsonl")};
        po.output_dir = dir / "data" / part;
        prepare_dataset(po, *tok, log);
    }
    std::fprintf(out, "  %lld documents, %.2f MB from %s%s; %zu held out\n",
                 static_cast<long long>(rep.corpus_documents), rep.corpus_bytes / 1e6,
                 roots.front().parent_path().string().c_str(),
                 roots.size() > 1 ? " (docs, src, tests)" : "", split.heldout.size());

    // On a GPU: one worker. On the CPU: data-parallel workers of one thread each: they never wait
    // for each other inside a step, which matters on a busy machine (docs/performance.md).
    const DeviceKind kind = resolve_backend(runtime.backend);
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int n_workers = kind == DeviceKind::cuda ? 1 : std::min(cores, 4);
    const std::unique_ptr<Backend> be =
        make_backend(kind, 0, 1, graph_options_from_settings(user_settings));
    rep.backend = be->name();
    std::fprintf(out, "  backend: %s\n", rep.backend.c_str());
    const std::string workers = std::to_string(n_workers);
    const std::string per_worker_batch = std::to_string(std::max(1, 4 / n_workers));

    // 2. Pretrain the target.
    print_stage(out, 2, "pretrain a small Qwen3-layout target (dflash pretrain)");
    const auto t_pre = Clock::now();
    const config::Settings pre_settings = with_demo_defaults(
        user_settings, {{"runtime.devices", workers},
                        {"runtime.threads", "1"},
                        {"pretrain.hidden_size", "256"},
                        {"pretrain.num_layers", "4"},
                        {"pretrain.num_heads", "4"},
                        {"pretrain.num_kv_heads", "2"},
                        {"pretrain.head_dim", "64"},
                        {"pretrain.intermediate_size", "768"},
                        {"pretrain.max_length", "256"},
                        {"pretrain.lr", "3e-3"},
                        {"pretrain.max_steps", std::to_string(plan.pretrain_steps)},
                        {"train.batch_size", per_worker_batch},
                        {"train.log_every", "50"},
                        {"train.checkpoint_every", "100000"},
                        {"train.eval_every", "100000"}});
    train::PretrainJob pj;
    pj.data_dir = dir / "data/train";
    pj.eval_data_dir = dir / "data/heldout";
    pj.output_dir = dir / "target";
    rep.target = pretrain_from_settings(pj, pre_settings, log);
    const std::string heldout =
        rep.target.final_eval ? fmt::format(", held-out loss {:.3f}", rep.target.final_eval->loss)
                              : "";
    std::fprintf(out, "  target: loss %.3f -> %.3f in %lld steps (%.0f s)%s\n",
                 rep.target.first_loss, rep.target.final_loss,
                 static_cast<long long>(rep.target.steps), since(t_pre), heldout.c_str());
    const TargetModel target = TargetModel::load(*be, rep.target.model_dir);

    // 3. Regenerate responses with the target (the drafter learns the target, not the corpus).
    print_stage(out, 3, "regenerate training responses with the target (greedy)");
    const auto t_regen = Clock::now();
    RegenerateOptions ro;
    ro.generate.max_new_tokens = plan.regen_tokens;
    ro.generate.stop_tokens = default_stop_tokens(target.config(), tok.get());
    ro.workers = kind == DeviceKind::cuda ? 1 : cores;
    RegenerateStats rs;
    const auto samples = regenerate_responses(
        target, regeneration_prompts(split.train, plan.regen_prompts, *tok, seed), ro, log, &rs);
    write_samples_shard(dir / "data/regenerated", samples, *tok);
    std::fprintf(out, "  %lld responses, %lld tokens (%.0f s)\n",
                 static_cast<long long>(rs.samples), static_cast<long long>(rs.response_tokens),
                 since(t_regen));

    // 4. Train the drafter (of the architecture the user asked for: drafter.architecture).
    rep.drafter_architecture =
        drafter_options_from_settings(user_settings).architecture == "dflash2" ? "DFlash2"
                                                                               : "DFlash";
    print_stage(
        out, 4,
        fmt::format("train a {} drafter for the target (dflash train)", rep.drafter_architecture)
            .c_str());
    const auto t_dr = Clock::now();
    const config::Settings dr_settings = with_demo_defaults(
        user_settings, {{"runtime.devices", workers},
                        {"runtime.threads", "1"},
                        {"drafter.block_size", "8"},
                        {"drafter.num_layers", "1"},
                        {"drafter.target_layer_ids", "1,2"},  // never the last (hf_config.h)
                        {"train.max_steps", std::to_string(plan.drafter_steps)},
                        {"train.max_length", "256"},
                        {"train.batch_size", per_worker_batch},
                        {"train.num_anchors", "48"},
                        {"train.loss_decay_gamma", "4"},
                        {"train.lr", "3e-3"},
                        {"train.log_every", "50"},
                        {"train.checkpoint_every", "100000"},
                        {"train.eval_every", std::to_string(plan.drafter_steps / 4)},
                        {"train.eval_prompt_count", "8"},
                        {"train.eval_max_new_tokens", "64"}});
    train::DrafterTrainJob dj;
    dj.target_dir = rep.target.model_dir;
    dj.data_dir = dir / "data/regenerated";
    dj.output_dir = dir / "drafter";
    dj.eval_prompts = dir / "corpus/heldout_prompts.jsonl";
    dj.hooks.on_record = [&](const train::StepRecord& r) {
        if (rep.drafter_first_acc.empty() && !r.eval) rep.drafter_first_acc = r.acc;
        if (r.eval && r.decode) rep.eval_tau.emplace_back(r.step, r.decode->tau());
    };
    rep.drafter = train_drafter_from_settings(dj, dr_settings, log);
    std::fprintf(out, "  drafter: loss %.3f -> %.3f in %lld steps (%.0f s)\n",
                 rep.drafter.first_loss, rep.drafter.final_loss,
                 static_cast<long long>(rep.drafter.steps), since(t_dr));
    std::fprintf(out, "  accuracy per block position, first step: %s\n",
                 acc_list(rep.drafter_first_acc).c_str());
    std::fprintf(out, "  accuracy per block position, last step:  %s  (implied tau %.2f)\n",
                 acc_list(rep.drafter.acc).c_str(), rep.drafter.tau_implied);
    std::string taus;
    for (const auto& [step, tau] : rep.eval_tau)
        taus += fmt::format("  step {}: {:.2f}", step, tau);
    std::fprintf(out, "  real tau on held-out prompts during training:%s\n", taus.c_str());

    // 5. Speculative decoding on held-out prompts.
    print_stage(out, 5, "speculative decoding on held-out prompts (dflash bench)");
    const DrafterModel drafter = DrafterModel::load(*be, rep.drafter.model_dir);
    const std::vector<Prompt> prompts =
        read_prompts(dir / "corpus/heldout_prompts.jsonl", tok.get(), target.config().vocab_size);
    GenerateOptions go = generate_options_from_settings(user_settings);
    go.max_new_tokens = user_settings.source("infer.max_new_tokens") == "default"
                            ? plan.bench_tokens
                            : go.max_new_tokens;
    go.stop_tokens = default_stop_tokens(target.config(), tok.get());
    rep.bench = run_bench(target, drafter, *be, prompts, go, log);
    write_text_atomic(dir / "bench.json", bench_to_json(rep.bench).dump(2) + "\n");
    std::fputs(format_bench_table(rep.bench).c_str(), out);
    print_examples(out, target, drafter, *be, prompts, go, *tok);
    rep.seconds = since(t_start);
    return rep;
}

}  // namespace dflash::demo
