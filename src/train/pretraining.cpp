// Target pretraining: the WorkerTask around TargetModel::train_step, and run_pretraining.
// Tested by tests/train/pretrain_test.cpp.
#include "train/pretraining.h"

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "model/target.h"
#include "tokenizer/model_tokenizer.h"
#include "train/checkpoint.h"
#include "train/model_snapshot.h"

namespace dflash::train {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kInitSalt = 0x7a67ull;

// The settings that fix the target's shape, which a resume cannot change.
const std::vector<std::string> kShapeKeys = {"pretrain.hidden_size", "pretrain.num_layers",
                                             "pretrain.num_heads",   "pretrain.num_kv_heads",
                                             "pretrain.head_dim",    "pretrain.intermediate_size"};

class PretrainTask : public WorkerTask {
  public:
    PretrainTask(Backend& be, const TargetModel& init, const Tokenizer& tok, bool loss_on_prompt,
                 int64_t ce_chunk)
        : model_(be, init.config()), tok_(tok), loss_on_prompt_(loss_on_prompt), chunk_(ce_chunk) {
        model_.params().copy_from(init.params());
        model_.params().enable_training();
    }

    ParamSet& params() override { return model_.params(); }
    int64_t num_positions() const override { return 1; }
    int64_t stats_offset() const override { return 0; }
    bool reports_tau() const override { return false; }

    void prepare(MicroBatch& mb, Rng&) const override {
        // Row t predicts token t+1 with weight mask[t+1] (TargetModel::train_step).
        if (loss_on_prompt_) std::fill(mb.seq.loss_mask.begin(), mb.seq.loss_mask.end(), 1);
        double w = 0;
        for (size_t t = 1; t < mb.seq.loss_mask.size(); ++t) w += mb.seq.loss_mask[t];
        mb.weight = w;
    }

    MicroBatch largest_batch(int64_t max_length) const override {
        MicroBatch mb;
        mb.seq.tokens.assign(static_cast<size_t>(std::max<int64_t>(2, max_length)), 0);
        mb.seq.loss_mask.assign(mb.seq.tokens.size(), 1);
        mb.weight = 1;
        return mb;
    }

    void run(Backend& be, Workspace& ws, const MicroBatch& mb, float grad_scale,
             const Tensor& stats) override {
        model_.train_step(be, ws, mb.seq.tokens, mb.seq.loss_mask, grad_scale, chunk_, stats);
    }

    void save_model(const fs::path& dir) const override {
        model_.save(dir, DType::bf16);
        save_tokenizer_spec(dir, tok_);
    }

    void reserve_snapshot(Backend& host) override {
        // MXFP4 experts exist only in loaded checkpoints; pretraining starts from random weights
        // or its own (bf16) checkpoints.
        DF_ASSERT(model_.packed_experts().empty(), "a pretrained target has packed experts");
        snapshot_.reserve(host, model_);
    }
    ModelSnapshot snapshot_model() override {
        const TargetModel& copy = snapshot_.fill(model_);
        return {&copy.params(), [this, &copy](const fs::path& dir) {
                    copy.save(dir, DType::bf16);
                    save_tokenizer_spec(dir, tok_);
                }};
    }

  private:
    TargetModel model_;
    const Tokenizer& tok_;
    bool loss_on_prompt_;
    int64_t chunk_;
    // The checkpoint writer's copy of the weights in host memory (snapshot_model).
    ModelSnapshotCopy<TargetModel> snapshot_;
};

}  // namespace

TargetConfig pretrain_target_config(const PretrainOptions& p, const Tokenizer& tok,
                                    int64_t data_vocab) {
    TargetConfig c;
    c.model_type = p.architecture;
    c.hidden_size = p.hidden_size;
    c.num_hidden_layers = p.num_layers;
    c.num_attention_heads = p.num_heads;
    c.num_key_value_heads = p.num_kv_heads;
    c.head_dim = p.head_dim;
    c.intermediate_size = p.intermediate_size;
    c.vocab_size = (std::max(tok.vocab_size(), data_vocab) + 7) / 8 * 8;
    // Generation runs past the training length (prompt + new tokens + a block): RoPE allows it.
    c.max_position_embeddings = std::max<int64_t>(4096, p.max_length);
    c.rms_norm_eps = 1e-6;
    c.rope.theta = p.rope_theta;
    if (p.rope_scaling == "llama3") {
        c.rope.scaling = {.type = RopeScalingType::llama3,  // Llama-3.1's rope_scaling
                          .factor = 8.0,
                          .low_freq_factor = 1.0,
                          .high_freq_factor = 4.0,
                          .original_max_position = 8192};
    }
    c.tie_word_embeddings = p.tie_word_embeddings;
    c.attention_bias = false;
    c.qk_norm = c.model_type == "qwen3";
    c.bos_token_id = tok.specials().bos;
    c.eos_token_id = tok.specials().eos;
    c.torch_dtype = "bfloat16";
    const auto problems = c.problems();
    DF_CHECK(problems.empty(), "the pretrain.* settings do not make a valid target: {}",
             problems.front());
    return c;
}

TrainSummary run_pretraining(const PretrainJob& job, const RunSettings& settings,
                             const Logger& log) {
    const TrainingRun run({.kind = "target",
                           .data_dir = job.data_dir,
                           .eval_data_dir = job.eval_data_dir,
                           .output_dir = job.output_dir,
                           .resume = job.resume,
                           .shape_keys = kShapeKeys},
                          settings, log);
    const TrainingOptions& o = run.options();
    const ShardedDataset& train = run.train_data();
    const auto tok = make_tokenizer(train.tokenizer_name());

    // The initial weights are made once in host memory, on every core the run may use
    // (fill_normal_hash draws the same weights on any number); each worker copies them to its
    // device.
    const int64_t threads = o.runtime.threads;
    const std::unique_ptr<Backend> host = make_cpu_backend(
        threads > 0 ? static_cast<int>(threads)
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    const TargetModel init =
        run.resume_from() ? TargetModel::load(*host, *run.resume_from())
                          : TargetModel::random(
                                *host, pretrain_target_config(o.pretrain, *tok, train.vocab_size()),
                                o.runtime.seed ^ kInitSalt);
    const TargetConfig& c = init.config();
    log.info("target: {}, {} layers, hidden {}, heads {}/{}, vocab {}, {} parameters", c.model_type,
             c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
             c.vocab_size, init.params().numel());

    TrainerSpec spec = run.spec(job.hooks);
    const bool on_prompt = o.pretrain.loss_on_prompt;
    const int64_t chunk = o.train.lm_head_chunk;
    spec.make_task = [&](int, Backend& be) {
        return std::make_unique<PretrainTask>(be, init, *tok, on_prompt, chunk);
    };
    return run.train(spec, log);
}

}  // namespace dflash::train
