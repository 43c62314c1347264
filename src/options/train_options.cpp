// train.* -> train::TrainOptions (see train_options.h). Tested by tests/options/options_test.cpp.
#include "options/train_options.h"

#include "core/error.h"

namespace dflash {

train::TrainOptions train_options_from_settings(const config::Settings& s) {
    train::TrainOptions o;
    o.lr = s.get<double>("train.lr");
    o.warmup_ratio = s.get<double>("train.warmup_ratio");
    o.schedule = train::parse_schedule_kind(s.get<std::string>("train.schedule"));
    o.grad_clip = s.get<double>("train.grad_clip");
    o.weight_decay = s.get<double>("train.weight_decay");
    o.beta1 = s.get<double>("train.beta1");
    o.beta2 = s.get<double>("train.beta2");
    o.adam_eps = s.get<double>("train.adam_eps");
    o.epochs = s.get<int64_t>("train.epochs");
    o.max_steps = s.get<int64_t>("train.max_steps");
    o.batch_size = s.get<int64_t>("train.batch_size");
    o.max_length = s.get<int64_t>("train.max_length");
    o.accumulation = s.get<int64_t>("train.accumulation");
    o.checkpoint_every = s.get<int64_t>("train.checkpoint_every");
    o.shard_optimizer_state = s.get<bool>("train.shard_optimizer_state");
    o.replica_check_every = s.get<int64_t>("train.replica_check_every");
    o.eval_every = s.get<int64_t>("train.eval_every");
    o.log_every = s.get<int64_t>("train.log_every");
    o.output_dir = s.get<std::string>("train.output_dir");
    o.eval_data = s.get<std::string>("train.eval_data");
    o.eval_sequences = s.get<int64_t>("train.eval_sequences");
    o.eval_prompts = s.get<std::string>("train.eval_prompts");
    o.eval_prompt_count = s.get<int64_t>("train.eval_prompt_count");
    o.eval_max_new_tokens = s.get<int64_t>("train.eval_max_new_tokens");
    o.keep_best = s.get<bool>("train.keep_best");
    o.best_metric = s.get<std::string>("train.best_metric");
    o.lm_head_chunk = s.get<int64_t>("train.lm_head_chunk");
    o.num_anchors = s.get<int64_t>("train.num_anchors");
    o.loss_decay_gamma = s.get<double>("train.loss_decay_gamma");
    o.loss = parse_loss_mix(s.get<std::string>("train.loss"));
    o.documents = s.get<std::string>("train.documents");
    o.selector_loss_alpha = s.get<double>("train.selector_loss_alpha");
    o.loss_weighting = parse_loss_weighting(s.get<std::string>("train.loss_weighting"));
    o.dpace_alpha = s.get<double>("train.dpace_alpha");
    o.optimizer = s.get<std::string>("train.optimizer");
    o.muon_lr = s.get<double>("train.muon_lr");
    o.muon_weight_decay = s.get<double>("train.muon_weight_decay");
    o.muon_ns_steps = s.get<int64_t>("train.muon_ns_steps");
    o.muon_adjust_lr = s.get<std::string>("train.muon_adjust_lr");
    o.hidden_noise = s.get<double>("train.hidden_noise");
    o.recompute_layers = s.get<bool>("train.recompute_layers");
    if (o.loss_weighting == LossWeighting::dpace) {
        // D-PACE weighs a slot by the draft's probability of the data's token: a cross-entropy
        // quantity, meaningless for a distillation loss.
        DF_CHECK(o.loss.is_only(LossKind::ce),
                 "train.loss_weighting=dpace needs train.loss=ce (D-PACE weighs each slot by the "
                 "draft's probability of the data's token), but train.loss={}",
                 o.loss.name());
        DF_CHECK(o.dpace_alpha > 0,
                 "train.dpace_alpha={} must be in (0, 1]: at 0 a slot the draft gets wrong would "
                 "end every later slot's credit",
                 o.dpace_alpha);
    }
    return o;
}

}  // namespace dflash
