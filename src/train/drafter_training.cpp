// Drafter training: the WorkerTask that runs the frozen target and the drafter's DFlash loss (and,
// at evaluations, speculative decoding of held-out prompts), and run_drafter_training. Tested by
// tests/train/trainer_test.cpp, tests/train/checkpoint_test.cpp and
// tests/train/eval_decode_test.cpp.
#include "train/drafter_training.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

#include "core/error.h"
#include "data/anchors.h"
#include "infer/prompts.h"
#include "infer/spec_decode.h"
#include "infer/stop_tokens.h"
#include "tokenizer/model_tokenizer.h"
#include "train/checkpoint.h"
#include "train/loop_options.h"
#include "train/model_snapshot.h"

namespace dflash::train {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kInitSalt = 0x1417ull;

struct DrafterLossOptions {
    int64_t num_anchors = 512;
    double gamma = 7.0;
    int64_t ce_chunk = 8192;
    LossMix loss;                   // train.loss
    bool documents = false;         // train.documents = separate
    double selector_alpha = 1.0;    // train.selector_loss_alpha (DFlash2 drafters)
    double dpace_alpha = 0;         // > 0: train.loss_weighting = dpace with train.dpace_alpha
    double hidden_noise = 0;        // train.hidden_noise
    bool recompute_layers = false;  // train.recompute_layers
    DsparkLossWeights dspark{};     // train.dspark_*_alpha (DSpark drafters)
    // drafter.dialect: DSpark drafters' config.json layout when saved.
    DrafterDialect dialect = DrafterDialect::deepspec;
    // The decay gamma of the weights known before the forward: with D-PACE 0 (uniform), so that
    // a sequence's normaliser is its count of trained slots (docs/training.md "D-PACE").
    double static_gamma() const { return dpace_alpha > 0 ? 0.0 : gamma; }
};

// The drafter every worker starts from: `model` (loaded: a resume's or --init-drafter's), or
// when null random weights drawn from `seed` (DrafterModel::randomize) on the worker's device.
struct InitialDrafter {
    DrafterConfig config;
    const DrafterModel* model = nullptr;
    uint64_t seed = 0;
};

// What an evaluation decodes: the first train.eval_prompt_count prompts, greedily.
struct DecodeEvalSetup {
    std::vector<Prompt> prompts;
    GenerateOptions options;
};

class DrafterTask : public WorkerTask {
  public:
    // The replica lives on be's device; the frozen target is `shared` when it lives there (CPU
    // workers share one), else this worker's own, loaded from target_dir onto be's device (see
    // run_drafter_training). decode: null when evaluations do not decode.
    DrafterTask(Backend& be, const TargetModel* shared, const fs::path& target_dir,
                const InitialDrafter& init, const Tokenizer& tok, DrafterLossOptions opt,
                const DecodeEvalSetup* decode)
        : target_(shared), drafter_(be, init.config), tok_(tok), opt_(opt), decode_(decode) {
        if (!shared || shared->backend().device() != be.device()) {
            own_target_.emplace(TargetModel::load(be, target_dir));
            target_ = &*own_target_;
        }
        // A random drafter is drawn on the replica's own device: the same weights on every
        // worker (fill_normal_hash), with no host copy to make and upload.
        if (init.model != nullptr)
            drafter_.params().copy_from(init.model->params());
        else
            drafter_.randomize(init.seed);
        drafter_.params().enable_training();
        // Evaluation's per-row outputs: room for the most rows a micro-batch has.
        const int64_t rows = std::max<int64_t>(1, opt_.num_anchors * drafter_.block_size());
        eval_argmax_ = DeviceTensor(be, {rows}, DType::i32);
        eval_tv_ = DeviceTensor(be, {rows}, DType::f32);
        if (dspark() && drafter_.config().ds.confidence_head)
            eval_conf_ = DeviceTensor(be, {rows}, DType::f32);
    }

    ParamSet& params() override { return drafter_.params(); }
    // DSpark: every slot drafts (position k = slot k); DFlash: block positions 1..B-1.
    bool dspark() const { return drafter_.config().dspark(); }
    int64_t num_positions() const override { return drafter_.config().num_drafts(); }
    int64_t stats_offset() const override { return dspark() ? 0 : 1; }
    bool reports_tau() const override { return true; }

    std::string loss_kind() const override {
        if (!dspark()) return opt_.loss.name();
        return fmt::format("dspark({:g}*ce+{:g}*l1+{:g}*bce)", opt_.dspark.ce, opt_.dspark.l1,
                           opt_.dspark.confidence);
    }

    // DFlash2: the candidate selector's sums (SelectorStatsLayout) after the loss stats.
    int64_t extra_stats_size() const override {
        return drafter_.config().dflash2() ? SelectorStatsLayout{drafter_.block_size()}.size() : 0;
    }

    void add_extra_metrics(const std::vector<double>& e, double weight_sum,
                           StepRecord& r) const override {
        if (e.empty()) return;
        const SelectorStatsLayout lay{drafter_.block_size()};
        DF_ASSERT(static_cast<int64_t>(e.size()) == lay.size());
        auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
        SelectorMetrics m;
        m.top_k = drafter_.config().d2.selector_top_k;
        m.alpha = opt_.selector_alpha;
        m.unary_loss = r.loss;
        m.selector_loss = ratio(e[SelectorStatsLayout::kLossSum], weight_sum);
        const double rows = e[SelectorStatsLayout::kRows], blocks = e[SelectorStatsLayout::kBlocks];
        m.recall = ratio(e[SelectorStatsLayout::kHits], rows);
        m.teacher_forced_acc = ratio(e[SelectorStatsLayout::kPicks], rows);
        m.path_accept_len = 1.0 + ratio(e[SelectorStatsLayout::kPathRun], blocks);
        m.oracle_accept_len = 1.0 + ratio(e[SelectorStatsLayout::kOracleRun], blocks);
        for (int64_t k = 1; k < lay.block; ++k)
            m.path_acc.push_back(ratio(e[lay.path_correct(k)], e[lay.path_count(k)]));
        r.loss = m.unary_loss + m.alpha * m.selector_loss;
        r.selector = m;
    }

    void prepare(MicroBatch& mb, Rng& rng) const override {
        mb.anchors = opt_.documents
                         ? sample_document_anchors(mb.seq.loss_mask, mb.seq.sample_starts,
                                                   drafter_.block_size(), opt_.num_anchors, rng)
                         : sample_anchors(mb.seq.loss_mask, opt_.num_anchors, rng);
        mb.weight = mb.anchors.empty()
                        ? 0.0
                        : drafter_.weight_sum(mb.seq.loss_mask, mb.anchors, opt_.static_gamma());
        // Drawn after the anchors, so the anchors are those of a run without noise.
        mb.noise_seed = rng.next_u64();
    }

    MicroBatch largest_batch(int64_t max_length) const override {
        MicroBatch mb;
        mb.seq.tokens.assign(static_cast<size_t>(max_length), 0);
        mb.seq.loss_mask.assign(static_cast<size_t>(max_length), 1);
        const int64_t n = std::min(opt_.num_anchors, max_length);
        for (int64_t j = 0; j < n; ++j)
            mb.anchors.push_back(static_cast<int32_t>(j * max_length / n));
        mb.weight = 1;
        return mb;
    }

    void run(Backend& be, Workspace& ws, const MicroBatch& mb, float grad_scale,
             const Tensor& stats) override {
        const auto S = static_cast<int64_t>(mb.seq.tokens.size());
        // The features stay while the drafter runs; the target's own activations are given back
        // before the drafter takes its memory (its staged inputs keep their place: the step may
        // be recorded).
        Tensor features = ws.take({S, drafter_.feature_dim()}, be.compute_dtype());
        BlockObjective objective = make_objective(be, ws, mb);
        if (evaluating()) {
            const auto R = static_cast<int64_t>(mb.anchors.size()) * drafter_.block_size();
            objective.eval_argmax = eval_argmax_.view().rows(0, R);
            objective.eval_tv = eval_tv_.view().rows(0, R);
            if (!eval_conf_.empty()) objective.eval_conf = eval_conf_.view().rows(0, R);
        }
        const int64_t n_loss = LossStatsLayout{drafter_.block_size()}.size();
        if (extra_stats_size() > 0) {
            objective.selector_stats = stats.rows(n_loss, n_loss + extra_stats_size());
            objective.selector_alpha = opt_.selector_alpha;
        }
        const Workspace::Mark m = ws.mark();
        if (opt_.documents) {
            target_->forward_documents(be, ws, mb.seq.tokens, mb.seq.sample_starts,
                                       drafter_.config().target_layer_ids, features,
                                       objective.teacher_hidden);
        } else {
            target_->forward(be, ws, mb.seq.tokens, drafter_.config().target_layer_ids, features,
                             objective.teacher_hidden);
        }
        ws.release_scratch(m);
        drafter_.train_step(be, ws,
                            {features, mb.seq.tokens, mb.seq.loss_mask, mb.anchors, mb.noise_seed},
                            {target_->embed(), target_->lm_head(), opt_.gamma, opt_.ce_chunk,
                             opt_.dpace_alpha, opt_.hidden_noise, opt_.recompute_layers},
                            {grad_scale, stats.rows(0, n_loss)}, objective);
    }

    std::vector<int64_t> step_shape(const MicroBatch& mb) const override {
        std::vector<int64_t> shape = WorkerTask::step_shape(mb);
        // Separate documents: one target forward per document, so their lengths shape the step.
        if (opt_.documents)
            for (const auto start : mb.seq.sample_starts) shape.push_back(start);
        return shape;
    }

    void save_model(const fs::path& dir) const override { write_model(drafter_, dir); }

    void reserve_snapshot(Backend& host) override { snapshot_.reserve(host, drafter_); }
    ModelSnapshot snapshot_model() override {
        const DrafterModel& copy = snapshot_.fill(drafter_);
        return {&copy.params(), [this, &copy](const fs::path& dir) { write_model(copy, dir); }};
    }

    std::optional<AcceptanceSums> eval_acceptance(Backend& be, const MicroBatch& mb) override {
        const auto R = static_cast<int64_t>(mb.anchors.size()) * drafter_.block_size();
        std::vector<int32_t> argmax(static_cast<size_t>(R));
        std::vector<float> tv(static_cast<size_t>(R));
        AcceptanceSums s;
        if (R == 0) return s;
        be.download(Tensor(argmax.data(), DType::i32, {R}), eval_argmax_.view().rows(0, R));
        be.download(Tensor(tv.data(), DType::f32, {R}), eval_tv_.view().rows(0, R));
        if (dspark()) {
            // DSpark's own metrics over all B slots, before the shift below.
            std::vector<float> conf;
            if (!eval_conf_.empty()) {
                conf.resize(static_cast<size_t>(R));
                be.download(Tensor(conf.data(), DType::f32, {R}), eval_conf_.view().rows(0, R));
            }
            add_dspark_metrics(mb.seq.loss_mask, mb.anchors, drafter_.block_size(),
                               opt_.static_gamma(), tv, conf, s.dspark);
        }
        // DSpark slot k drafts token a + k + 1, DFlash row k + 1 does: shifted into the DFlash
        // rows add_block_acceptance reads, the first B - 1 slots are measured.
        if (dspark()) {
            const int64_t B = drafter_.block_size();
            for (int64_t r0 = 0; r0 < R; r0 += B)
                for (int64_t k = B - 1; k >= 1; --k) {
                    argmax[static_cast<size_t>(r0 + k)] = argmax[static_cast<size_t>(r0 + k - 1)];
                    tv[static_cast<size_t>(r0 + k)] = tv[static_cast<size_t>(r0 + k - 1)];
                }
        }
        add_block_acceptance(mb.seq.tokens, mb.seq.loss_mask, mb.anchors, drafter_.block_size(),
                             argmax, tv, s);
        return s;
    }

    std::optional<DecodeEval> decode_eval(Backend& be) override {
        if (!decode_) return std::nullopt;
        const auto t0 = std::chrono::steady_clock::now();
        // A copy without gradients: the engine gets an inference model, and the replica's
        // training state stays untouched whatever the engine does with its model.
        if (!eval_model_) eval_model_.emplace(be, drafter_.config());
        eval_model_->params().copy_from(drafter_.params());
        SpeculativeEngine engine(*target_, &*eval_model_, be);
        DecodeEval d;
        d.accept_hist.assign(static_cast<size_t>(drafter_.config().num_drafts() + 2), 0);
        for (const Prompt& p : decode_->prompts) {
            const GenerateResult g = engine.generate(p.tokens, decode_->options);
            d.prompts += 1;
            d.new_tokens += g.stats.new_tokens;
            d.steps += g.stats.steps;
            DF_ASSERT(g.stats.accept_hist.size() == d.accept_hist.size());
            for (size_t n = 0; n < d.accept_hist.size(); ++n)
                d.accept_hist[n] += g.stats.accept_hist[n];
        }
        d.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return d;
    }

  private:
    // What the step optimises beyond plain CE over the packed sequence: for a loss with a teacher
    // term, room for the target's final hidden states (kept with the features while the drafter
    // runs; ce takes no memory for them); for separate documents, each anchor's document start.
    BlockObjective make_objective(Backend& be, Workspace& ws, const MicroBatch& mb) {
        BlockObjective o;
        o.loss = opt_.loss;
        o.dspark = opt_.dspark;
        if (opt_.loss.needs_teacher() || dspark() || evaluating()) {
            const auto S = static_cast<int64_t>(mb.seq.tokens.size());
            o.teacher_hidden = ws.take({S, target_->dims().D}, be.compute_dtype());
        }
        if (opt_.documents) {
            context_starts_ = anchor_document_starts(mb.anchors, mb.seq.sample_starts);
            o.context_starts = context_starts_;
        }
        return o;
    }

    // Evaluation runs the replica without gradients (and then keeps its rows' argmax and TV
    // distance for eval_acceptance).
    bool evaluating() { return !drafter_.params().has_grads(); }

    const TargetModel* target_;
    std::optional<TargetModel> own_target_;
    DrafterModel drafter_;
    const Tokenizer& tok_;
    DrafterLossOptions opt_;
    const DecodeEvalSetup* decode_;
    std::optional<DrafterModel> eval_model_;  // made at the first decoding evaluation
    std::vector<int32_t> context_starts_;     // of the micro-batch being run
    // save_model's files of `m` (the replica or the checkpoint writer's copy of it).
    void write_model(const DrafterModel& m, const fs::path& dir) const {
        m.save(dir, DType::bf16);
        if (dspark()) m.config().save(dir, opt_.dialect);  // config.json in its dialect
        save_tokenizer_spec(dir, tok_);
    }

    // The checkpoint writer's copy of the weights in host memory (snapshot_model).
    ModelSnapshotCopy<DrafterModel> snapshot_;
    DeviceTensor eval_argmax_;  // i32 [num_anchors * B]: BlockObjective::eval_argmax
    DeviceTensor eval_tv_;      // f32 [num_anchors * B]: BlockObjective::eval_tv
    DeviceTensor eval_conf_;    // f32 [num_anchors * B]: BlockObjective::eval_conf (DSpark)
};

// The prompts of decoding evaluations (null when there are none to decode).
std::unique_ptr<DecodeEvalSetup> make_decode_setup(const fs::path& given,
                                                   const TargetConfig& target, const Tokenizer& tok,
                                                   const TrainingOptions& o, const Logger& log) {
    const fs::path path = given.empty() ? o.train.eval_prompts : given;
    if (path.empty()) return nullptr;
    auto setup = std::make_unique<DecodeEvalSetup>();
    setup->prompts = read_prompts(path, &tok, target.vocab_size);
    const auto count = static_cast<size_t>(o.train.eval_prompt_count);
    if (setup->prompts.size() > count) setup->prompts.resize(count);
    setup->options.max_new_tokens = o.train.eval_max_new_tokens;
    setup->options.draft_precision = o.infer.draft_precision;
    setup->options.stop_tokens = default_stop_tokens(target, &tok);
    log.info("evaluation decodes {} prompt(s) of {} greedily, up to {} tokens each",
             setup->prompts.size(), path.string(), setup->options.max_new_tokens);
    return setup;
}

}  // namespace

std::unique_ptr<Tokenizer> training_tokenizer(const fs::path& target_dir,
                                              const std::string& dataset_tokenizer,
                                              const ChatOptions& chat) {
    // No fallback: ids mean something only with the target's own tokenizer.
    DF_CHECK(has_tokenizer_spec(target_dir),
             "the target '{}' names no tokenizer (no tokenizer.json or {}), so nothing says that "
             "the data's ids (tokenizer '{}') mean to it what they meant when tokenized; copy the "
             "model's tokenizer files into the target directory",
             target_dir.string(), kTokenizerSpecFile, dataset_tokenizer);
    std::unique_ptr<Tokenizer> tok;
    try {
        tok = load_tokenizer_for_model(target_dir, chat);
    } catch (const Error& e) {
        DF_FAIL("the target's tokenizer cannot be used, so training on it is refused: {}",
                e.what());
    }
    DF_CHECK(tok->name() == dataset_tokenizer,
             "the target '{}' uses tokenizer '{}' but the data was tokenized with '{}'; "
             "re-run `dflash data prepare --model {}` so the data is in the target's ids",
             target_dir.string(), tok->name(), dataset_tokenizer, target_dir.string());
    return tok;
}

void apply_attention_layout(const DrafterOptions& d, DrafterConfig& c) {
    const int64_t L = c.layer.num_hidden_layers;
    c.sliding_layers.assign(L, false);
    c.sliding_window = 0;
    if (d.layer_types.empty()) return;
    DF_CHECK(static_cast<int64_t>(d.layer_types.size()) == L,
             "drafter.layer_types has {} entries but the drafter has {} layers "
             "(drafter.num_layers): give exactly one full_attention or sliding_attention per layer",
             d.layer_types.size(), L);
    for (int64_t l = 0; l < L; ++l) {
        const std::string& t = d.layer_types[static_cast<size_t>(l)];
        DF_CHECK(t == "full_attention" || t == "sliding_attention",
                 "drafter.layer_types[{}] is '{}' (expected full_attention or sliding_attention)",
                 l, t);
        c.sliding_layers[static_cast<size_t>(l)] = t == "sliding_attention";
    }
    const bool any =
        std::find(c.sliding_layers.begin(), c.sliding_layers.end(), true) != c.sliding_layers.end();
    DF_CHECK(!any || d.sliding_window > 0,
             "drafter.layer_types has sliding_attention layers but drafter.sliding_window is {}: "
             "give the window W > 0 (the keys each of their queries sees)",
             d.sliding_window);
    if (any) c.sliding_window = d.sliding_window;
    const auto p = c.problems();
    DF_CHECK(p.empty(), "drafter.layer_types / drafter.sliding_window: {}",
             fmt::format("{}", fmt::join(p, "; ")));
}

DrafterConfig initial_drafter_config(const TargetConfig& tc, const Tokenizer& tok,
                                     const DrafterOptions& d) {
    int64_t mask = d.mask_token_id;
    if (mask < 0) mask = tok.specials().mask;
    // No <|MASK|> token: the first embedding row past the tokenizer's ids, which is what Qwen3
    // drafters use (151669: Qwen3's ids end with </think> = 151668; the embedding has 151936 rows).
    if (mask < 0 && tok.vocab_size() < tc.vocab_size) mask = tok.vocab_size();
    DF_CHECK(mask >= 0,
             "the tokenizer has no <|MASK|> token and the target's embedding has no row past the "
             "tokenizer's {} ids; set drafter.mask_token_id to the id of a reserved token the "
             "target never produces",
             tok.vocab_size());
    DF_CHECK(mask < tc.vocab_size,
             "drafter.mask_token_id={} is outside the target vocabulary "
             "(size {}); the MASK row must exist in the target's embedding",
             mask, tc.vocab_size);
    auto ids = d.target_layer_ids;
    if (ids.empty()) {
        // Spacing the ids by at least one layer needs L-3 >= n (default_target_layer_ids).
        const int64_t n = std::clamp<int64_t>(tc.num_hidden_layers - 3, 1, d.num_target_features);
        ids = default_target_layer_ids(tc.num_hidden_layers, n);
    }
    DrafterConfig dc = make_drafter_config(tc, d.num_layers, d.block_size, mask, std::move(ids));
    apply_attention_layout(d, dc);
    if (d.architecture == "dspark") return dspark_config(dc, d);
    if (d.architecture != "dflash2") return dc;
    return dflash2_config(dc, d);
}

uint64_t initial_drafter_seed(uint64_t seed) {
    return seed ^ kInitSalt;
}

DrafterModel make_initial_drafter(Backend& be, const TargetModel& target, const Tokenizer& tok,
                                  const DrafterOptions& d, uint64_t seed) {
    return DrafterModel::random(be, initial_drafter_config(target.config(), tok, d),
                                initial_drafter_seed(seed));
}

DrafterConfig dspark_config(const DrafterConfig& base, const DrafterOptions& d) {
    DrafterConfig c = base;
    c.arch = DrafterArch::dspark;
    c.ds.markov_rank = d.markov_rank;
    c.ds.markov_head = parse_markov_head_type(d.markov_head_type, "drafter.markov_head_type");
    c.ds.confidence_head = d.confidence_head;
    c.ds.confidence_with_markov = d.confidence_head_with_markov;
    const auto p = c.problems();
    DF_CHECK(p.empty(), "cannot make a DSpark drafter from these settings: {}",
             fmt::format("{}", fmt::join(p, "; ")));
    return c;
}

DrafterConfig dflash2_config(const DrafterConfig& base, const DrafterOptions& d) {
    DrafterConfig c = base;
    c.arch = DrafterArch::dflash2;
    c.d2.conv_kernel_size = d.conv_kernel_size;
    c.d2.conv_group_size = d.conv_group_size;
    c.d2.selector_rank = d.selector_rank;
    c.d2.selector_top_k = d.selector_top_k;
    // The base's sliding layers stay (causal, as their training mask and decoding make them);
    // without any, every layer is bidirectional as DFlash's.
    if (std::find(c.sliding_layers.begin(), c.sliding_layers.end(), true) ==
        c.sliding_layers.end()) {
        c.sliding_layers.assign(c.layer.num_hidden_layers, false);
        c.is_causal = 0;
    }
    const auto p = c.problems();
    DF_CHECK(p.empty(), "cannot make a DFlash2 drafter from these settings: {}",
             fmt::format("{}", fmt::join(p, "; ")));
    return c;
}

TrainSummary run_drafter_training(const DrafterTrainJob& job, const RunSettings& settings,
                                  const Logger& log) {
    DF_CHECK(!job.target_dir.empty(), "no target: give --target DIR (an HF model directory)");
    const TrainingRun run({.kind = "drafter",
                           .data_dir = job.data_dir,
                           .eval_data_dir = job.eval_data_dir,
                           .output_dir = job.output_dir,
                           .resume = job.resume,
                           .shape_keys = {"drafter."}},
                          settings, log);
    const TrainingOptions& o = run.options();
    const ShardedDataset& train = run.train_data();

    // The frozen target is read once into host memory only for CPU workers, which share it;
    // workers on another device (CUDA) each load it from the directory straight onto theirs, so
    // the host never holds its weights (in f32 there: 108 GB for a 27B target) and MXFP4 experts
    // stay packed (gpt-oss-120b's decoded experts would not fit a GPU).
    const std::unique_ptr<Backend> host = make_cpu_backend(1);
    const TargetConfig target = TargetConfig::load(job.target_dir);
    std::optional<TargetModel> host_target;
    if (loop_options(o).backend == DeviceKind::cpu)
        host_target.emplace(TargetModel::load(*host, job.target_dir));
    const auto tok = training_tokenizer(job.target_dir, train.tokenizer_name(), o.chat);
    DF_CHECK(train.vocab_size() <= target.vocab_size,
             "the data's vocabulary ({} ids) is larger than the target's ({})", train.vocab_size(),
             target.vocab_size);

    // The starting weights: a resumed run overwrites them with the checkpoint's fp32 masters,
    // but the architecture comes from the checkpoint's config.json.
    const auto& resume_from = run.resume_from();
    // A fresh run's random drafter is not made here: each worker draws it on its own device
    // (make_initial_drafter's weights, DrafterTask).
    std::optional<DrafterModel> loaded;
    if (resume_from)
        loaded.emplace(DrafterModel::load(*host, *resume_from));
    else if (!job.init_drafter.empty())
        loaded.emplace(DrafterModel::load(*host, job.init_drafter));
    // DSpark warm start (docs/training.md "DSpark drafters"): a DFlash drafter given as the
    // initial drafter of a drafter.architecture=dspark run keeps its backbone, with new heads.
    if (!resume_from && loaded && o.drafter.architecture == "dspark" &&
        loaded->config().arch == DrafterArch::dflash) {
        log.info("warm start: DSpark heads added to the DFlash drafter {}",
                 job.init_drafter.string());
        DrafterModel v1 = std::move(*loaded);
        loaded.reset();
        loaded.emplace(DrafterModel::from_dflash(*host, v1, dspark_config(v1.config(), o.drafter),
                                                 o.runtime.seed));
    }
    const InitialDrafter init{
        .config = loaded ? loaded->config() : initial_drafter_config(target, *tok, o.drafter),
        .model = loaded ? &*loaded : nullptr,
        .seed = initial_drafter_seed(o.runtime.seed)};
    const auto mismatch = drafter_target_mismatches(init.config, target);
    DF_CHECK(mismatch.empty(), "the drafter does not fit the target '{}': {}",
             job.target_dir.string(), mismatch.front());
    int64_t numel = 0;
    for (const TensorSpec& t : drafter_tensor_specs(init.config)) numel += t.numel();
    log.info("drafter: {} layers, block {}, target layers [{}], mask id {}, {} parameters",
             init.config.layer.num_hidden_layers, init.config.block_size,
             fmt::join(init.config.target_layer_ids, ", "), init.config.mask_token_id, numel);

    const auto decode = make_decode_setup(job.eval_prompts, target, *tok, o, log);
    TrainerSpec spec = run.spec(job.hooks);
    spec.eval_decoding = decode != nullptr;
    const TrainOptions& t = o.train;
    DrafterLossOptions lo{t.num_anchors, t.loss_decay_gamma,        t.lm_head_chunk,
                          t.loss,        t.documents == "separate", t.selector_loss_alpha};
    if (t.loss_weighting == LossWeighting::dpace) lo.dpace_alpha = t.dpace_alpha;
    lo.hidden_noise = t.hidden_noise;
    lo.recompute_layers = t.recompute_layers;
    lo.dspark = {t.dspark_ce_alpha, t.dspark_l1_alpha, t.dspark_confidence_alpha};
    lo.dialect = parse_drafter_dialect(o.drafter.dialect);
    DF_CHECK(
        !init.config.dspark() ||
            (t.loss.is_only(LossKind::ce) && t.loss_weighting == LossWeighting::decay),
        "a DSpark drafter trains on its own loss (train.dspark_ce_alpha, train.dspark_l1_alpha, "
        "train.dspark_confidence_alpha): leave train.loss (now {}) and train.loss_weighting "
        "(now {}) at their defaults ce and decay",
        t.loss.name(), loss_weighting_name(t.loss_weighting));
    if (init.config.dspark())
        log.info(
            "objective: DSpark loss dspark({:g}*ce+{:g}*l1+{:g}*bce) (train.dspark_*_alpha; "
            "train.loss does not apply), markov head {} rank {}, train.documents={}",
            lo.dspark.ce, lo.dspark.l1, lo.dspark.confidence,
            markov_head_type_name(init.config.ds.markov_head), init.config.ds.markov_rank,
            t.documents);
    else
        log.info("objective: train.loss={}, train.loss_weighting={}{}, train.documents={}{}",
                 lo.loss.name(), loss_weighting_name(t.loss_weighting),
                 lo.dpace_alpha > 0 ? fmt::format(" (alpha {})", lo.dpace_alpha) : std::string(),
                 t.documents,
                 init.config.dflash2()
                     ? fmt::format(", train.selector_loss_alpha={} (DFlash2 selector, top-{})",
                                   lo.selector_alpha, init.config.d2.selector_top_k)
                     : std::string());
    spec.make_task = [&](int, Backend& be) {
        return std::make_unique<DrafterTask>(be, host_target ? &*host_target : nullptr,
                                             job.target_dir, init, *tok, lo, decode.get());
    };
    return run.train(spec, log);
}

}  // namespace dflash::train
