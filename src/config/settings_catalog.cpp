// The catalog: every dflash setting, declared once (docs/design.md "Settings"). A new tunable is
// added here and nowhere else; `dflash config list` and docs/settings.md show the result.
// Tested by tests/config/catalog_test.cpp.
#include <cstdint>
#include <limits>

#include "config/registry.h"

namespace dflash::config {
namespace {

using D = Declaration;
constexpr double kMaxI64 = static_cast<double>(std::numeric_limits<int64_t>::max());
constexpr double kBig = 1 << 30;  // a generous cap for counts and sizes

void add_runtime(Registry& r) {
    r.add(D::integer("runtime.devices", 1, "number of workers (one per device, one thread each)")
              .range(1, 1024)
              .read_by("train::Trainer (one worker per device), data regenerate (CPU workers)"));
    r.add(D::int_list("runtime.device_ids", {},
                      "the GPUs of this process's training workers, in worker order, one per "
                      "worker (as many as runtime.devices); empty = launch.local_rank x "
                      "runtime.devices + worker")
              .range(0, 1023)
              .read_by("train::Trainer"));
    r.add(D::enumeration("runtime.backend", "auto", {"auto", "cpu", "cuda"},
                         "compute backend; auto = cuda when a GPU is present, else cpu")
              .read_by("backend factory (src/backend/backend_factory.h): every command, the "
                       "trainer's workers"));
    r.add(D::integer("runtime.threads", 0, "CPU threads per worker; 0 = all cores / workers")
              .range(0, 4096)
              .read_by("cpu backend (its thread pool, backend/cpu/thread_pool.h)"));
    // host by default until a two-GPU run has shown the NCCL path exiting cleanly (issue 11).
    r.add(D::enumeration("runtime.gradient_exchange", "host", {"auto", "device", "host"},
                         "how GPU workers sum gradients: device = on the GPUs (NCCL), host = "
                         "through host memory (and TCP between processes); auto = device when "
                         "NCCL loads, else host with a warning")
              .read_by("train::Trainer (several GPU workers)"));
    r.add(D::string("runtime.nccl_library", "libnccl.so.2",
                    "NCCL shared library loaded when GPU workers sum on the devices (a name the "
                    "loader finds, or a path)")
              .read_by("CUDA backend (backend/cuda/nccl_collectives.h), train::Trainer"));
    r.add(D::real("runtime.gradient_bucket_mb", 64,
                  "GPU workers summing on the devices: the gradients are summed in buckets of "
                  "this many MiB (f32), each as soon as the backward pass has finished it, beside "
                  "the rest of the backward; 0 = one sum after the backward. Not with "
                  "train.shard_optimizer_state")
              .range(0, 1e6)
              .read_by("train::Trainer"));
    r.add(D::real("runtime.collective_timeout_s", 600,
                  "seconds a GPU worker waits on its device for the collectives of the others "
                  "(NCCL's set-up included) before NCCL is aborted and the run fails naming the "
                  "wait; a failed worker ends the others' waits at once")
              .range(0.001, 1e7)
              .read_by("CUDA backend (backend/cuda/nccl_collectives.h), train::Trainer"));
    r.add(D::integer("runtime.seed", 42, "seed of every random stream (init, data order, anchors)")
              .range(0, kMaxI64)
              .read_by("train::Trainer, data loader, pretrain"));
    r.add(D::enumeration("runtime.log_level", "info", {"trace", "debug", "info", "warn", "error"},
                         "lowest log level printed (also --log-level)")
              .read_by("cli/main.cpp (LogSink)"));
}

void add_launch(Registry& r) {
    // How a multi-process run finds itself (docs/design.md "Memory and threads"): one process per
    // node, each running runtime.devices workers. Launchers set their own variables; each setting
    // also reads them.
    const char* reader = "train::Trainer and pretraining (comm/launch.h): the process group";
    r.add(D::integer("launch.world_size", 1,
                     "processes of the run (one per node); their workers together form the "
                     "data-parallel group")
              .range(1, 65536)
              .also_from_env({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
              .read_by(reader));
    r.add(D::integer("launch.rank", 0, "this process, 0..launch.world_size-1")
              .range(0, 65535)
              .also_from_env({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
              .read_by(reader));
    r.add(D::integer("launch.local_rank", 0,
                     "this process among those on its node; worker w uses GPU local_rank x "
                     "runtime.devices + w")
              .range(0, 65535)
              .also_from_env(
                  {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
              .read_by(reader));
    r.add(D::integer("launch.local_world_size", 1, "processes on this node")
              .range(1, 65536)
              .also_from_env({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                              "SLURM_NTASKS_PER_NODE"})
              .read_by(reader));
    r.add(D::string("launch.master_addr", "127.0.0.1",
                    "host name or address where process 0 listens for the others")
              .also_from_env({"MASTER_ADDR"})
              .read_by(reader));
    r.add(D::integer("launch.master_port", 29500, "TCP port where process 0 listens")
              .range(1, 65535)
              .also_from_env({"MASTER_PORT"})
              .read_by(reader));
    r.add(D::real("launch.timeout_s", 1800,
                  "seconds a process waits for the others (start-up, every collective) before "
                  "the run fails naming the missing process")
              .range(0.001, 1e7)
              .read_by(reader));
    // A path, never the secret itself: settings are written to run directories and checkpoints.
    r.add(D::string("launch.secret_file", "",
                    "file holding the run's launch secret (the same on every process; mode 600, "
                    "at least 16 bytes): process 0 admits only processes that prove it; empty "
                    "= no secret, allowed only when process 0 listens on a loopback address")
              .read_by(reader));
    r.add(D::real("launch.hello_timeout_s", 5,
                  "seconds process 0 gives one connection to complete its authenticated hello "
                  "at the rendezvous before dropping it (the others are read meanwhile)")
              .range(0.001, 3600)
              .read_by(reader));
}

void add_cuda_graphs(Registry& r) {
    const char* reader =
        "CUDA graph cache (src/backend/cuda/graph_cache.h) of every CUDA backend a command makes: "
        "target decode/verify, drafter draft and training steps (Backend::run_step)";
    r.add(D::boolean("cuda_graphs.enabled", true,
                     "record steps into CUDA graphs and replay them; false runs every step "
                     "eagerly, with bit-identical results")
              .read_by(reader));
    r.add(D::boolean("cuda_graphs.programmatic_launch", true,
                     "launch the decode block's kernels with programmatic dependent launch, so "
                     "each starts while the one before it finishes; false launches each after "
                     "the one before, with bit-identical results")
              .read_by(reader));
    r.add(D::enumeration("cuda_graphs.capture_mode", "thread_local",
                         {"thread_local", "global", "relaxed"},
                         "cudaStreamCaptureMode of a capture (docs/engine.md): thread_local lets "
                         "other threads allocate and copy while one captures")
              .read_by(reader));
    r.add(D::integer("cuda_graphs.max_rerecords", 3,
                     "failed captures of one step retried before that step stays eager (each "
                     "failure is counted by reason; the first is logged)")
              .range(0, 1000)
              .read_by(reader));
    r.add(D::integer("cuda_graphs.warmup_runs", 2,
                     "eager runs of a step (shape) before it is captured")
              .range(0, 100)
              .read_by(reader));
    r.add(D::integer("cuda_graphs.max_graphs", 64,
                     "live graphs per device; beyond it the least recently replayed one is "
                     "dropped (and warmed up again if it returns)")
              .range(1, 100000)
              .read_by(reader));
}

void add_drafter(Registry& r) {
    r.add(D::integer("drafter.block_size", 16, "tokens per drafted block (anchor + B-1 masks)")
              .range(2, 256)
              .read_by("model::Drafter config, train::Trainer, infer engine"));
    r.add(D::integer("drafter.num_layers", 1, "drafter decoder layers")
              .range(1, 64)
              .read_by("model::Drafter config"));
    r.add(D::int_list("drafter.target_layer_ids", {},
                      "target layers whose outputs feed the drafter; empty = the reference rule "
                      "(docs/formats.md)")
              .range(0, 4095)
              .read_by("model::Drafter config, target feature capture"));
    r.add(D::integer("drafter.mask_token_id", -1, "MASK token id; -1 = derive from the tokenizer")
              .range(-1, std::numeric_limits<int32_t>::max())
              .read_by("model::Drafter config, tokenizer"));
    r.add(D::enumeration("drafter.architecture", "dflash", {"dflash", "dflash2", "dspark"},
                         "drafter made by `dflash init drafter`: dflash (DFlashDraftModel), "
                         "dflash2 (DFlash2DraftModel: conv around every sublayer + candidate "
                         "selector; its new modules start as identity / neutral) or dspark "
                         "(Qwen3DSparkModel: the anchor slot predicts too, Markov logit-bias and "
                         "confidence heads; docs/training.md \"DSpark drafters\")")
              .read_by("cli/cmd_init.cpp; cli/cmd_train.cpp (a DFlash2 run starts from an init)"));
    r.add(D::integer("drafter.conv_kernel_size", 2,
                     "DFlash2: taps of the grouped dynamic causal convolution (<= block_size)")
              .range(1, 256)
              .read_by("cli/cmd_init.cpp"));
    r.add(D::integer("drafter.conv_group_size", 16,
                     "DFlash2: channels per convolution group (must divide the hidden size)")
              .range(1, 1 << 17)
              .read_by("cli/cmd_init.cpp"));
    r.add(D::integer("drafter.selector_rank", 256, "DFlash2: rank r of the selector's codebooks")
              .range(1, 8192)
              .read_by("cli/cmd_init.cpp"));
    r.add(D::integer("drafter.selector_top_k", 16,
                     "DFlash2: candidates K the selector re-ranks per drafted slot")
              .range(1, 1024)
              .read_by("cli/cmd_init.cpp"));
    r.add(D::integer("drafter.markov_rank", 256, "DSpark: rank r of the Markov head's W1 / W2")
              .range(1, 8192)
              .read_by("cli/cmd_init.cpp; train (fresh DSpark drafters)"));
    r.add(
        D::enumeration("drafter.markov_head_type", "vanilla", {"vanilla", "gated", "rnn"},
                       "DSpark: Markov head; vanilla B = W2 W1[prev], gated B = W2 (sigmoid(Wg "
                       "[h; e] + bg) * e), rnn B = W2 tanh(o) of a state s over the block's slots")
            .read_by("cli/cmd_init.cpp; train (fresh DSpark drafters)"));
    r.add(D::boolean("drafter.confidence_head", true,
                     "DSpark: build the confidence head (predicts that a slot survives)")
              .read_by("cli/cmd_init.cpp; train (fresh DSpark drafters)"));
    r.add(D::boolean("drafter.confidence_head_with_markov", true,
                     "DSpark: the confidence head reads [h; W1[prev]] (true) or h alone")
              .read_by("cli/cmd_init.cpp; train (fresh DSpark drafters)"));
    r.add(D::enumeration("drafter.dialect", "deepspec", {"deepspec", "speculators"},
                         "DSpark: the config.json layout drafters are written in (`dflash train`, "
                         "`dflash init drafter`): deepspec (DeepSpec/SGLang, Qwen3DSparkModel) or "
                         "speculators (vLLM, speculators_model_type dspark); either is read")
              .read_by("cli/cmd_init.cpp; train (saved DSpark drafters)"));
    r.add(D::string_list("drafter.layer_types", {},
                         "per draft layer full_attention or sliding_attention (exactly "
                         "drafter.num_layers entries); empty = all full (docs/training.md "
                         "\"Sliding-window drafter layers\")")
              .read_by("model::Drafter config"));
    r.add(D::integer("drafter.sliding_window", 0,
                     "W, the keys a sliding_attention layer's query sees (itself included); "
                     "required > 0 when a layer slides")
              .range(0, 1 << 24)
              .read_by("model::Drafter config"));
    r.add(D::integer("drafter.num_target_features", 5,
                     "K, the number of target layers used when target_layer_ids is empty")
              .range(1, 64)
              .read_by("model::Drafter config"));
}

void add_train_optimizer(Registry& r) {
    r.add(D::real("train.lr", 6e-4, "peak learning rate").range(0, 10).read_by("train schedule"));
    r.add(D::real("train.warmup_ratio", 0.04, "fraction of steps spent in linear warm-up")
              .range(0, 1)
              .read_by("train schedule"));
    r.add(D::enumeration("train.schedule", "cosine", {"cosine", "linear", "constant"},
                         "learning-rate decay after warm-up")
              .read_by("train schedule"));
    r.add(D::real("train.grad_clip", 1.0, "global gradient-norm clip; 0 = off")
              .range(0, 1e6)
              .read_by("train::Trainer"));
    r.add(D::real("train.weight_decay", 0.0, "AdamW decoupled weight decay")
              .range(0, 10)
              .read_by("train AdamW"));
    r.add(D::real("train.beta1", 0.9, "AdamW beta1").range(0, 1).read_by("train AdamW"));
    r.add(D::real("train.beta2", 0.95, "AdamW beta2").range(0, 1).read_by("train AdamW"));
    r.add(D::real("train.adam_eps", 1e-8, "AdamW epsilon").range(0, 1).read_by("train AdamW"));
    r.add(D::enumeration("train.optimizer", "adamw", {"adamw", "muon"},
                         "adamw, or muon: Muon for the 2-D weights (not embeddings or LM heads), "
                         "AdamW for the rest (docs/training.md \"Muon\")")
              .read_by("train AdamW"));
    r.add(D::real("train.muon_lr", 0.0, "Muon's peak learning rate; 0 = 10 x train.lr")
              .range(0, 10)
              .read_by("train AdamW"));
    r.add(D::real("train.muon_weight_decay", 0.1,
                  "Muon's decoupled weight decay (applied with the unadjusted lr)")
              .range(0, 10)
              .read_by("train AdamW"));
    r.add(D::integer("train.muon_ns_steps", 5, "Muon's Newton-Schulz iterations")
              .range(1, 100)
              .read_by("train AdamW"));
    r.add(D::enumeration("train.muon_adjust_lr", "match_rms_adamw", {"match_rms_adamw", "original"},
                         "Muon's lr for an [A, B] weight: match_rms_adamw lr*0.2*sqrt(max(A,B)), "
                         "original lr*sqrt(max(1, A/B))")
              .read_by("train AdamW"));
    r.add(D::real("train.hidden_noise", 0.0,
                  "a: U(-a, a) noise added to the target features the drafter reads, in "
                  "training only (docs/training.md \"Hidden-state noise\"); 0 = none")
              .range(0, 100)
              .read_by("train drafter step"));
    r.add(D::boolean("train.recompute_layers", false,
                     "keep only each draft layer's input in the forward and recompute the layer "
                     "in the backward (less activation memory, one more layer forward)")
              .read_by("train drafter step"));
}

void add_train(Registry& r) {
    r.add(D::integer("train.epochs", 6, "passes over the training data")
              .range(1, 100000)
              .read_by("train::Trainer"));
    r.add(D::integer("train.max_steps", 0, "optimizer steps; 0 = derive from train.epochs")
              .range(0, kBig)
              .read_by("train::Trainer, train schedule"));
    r.add(D::integer("train.batch_size", 1, "sequences per worker per micro-step")
              .range(1, 65536)
              .read_by("data loader, train::Worker"));
    r.add(D::integer("train.max_length", 3072, "tokens per training sequence (longer ones are cut)")
              .range(16, 1 << 22)
              .read_by("data loader, arena planning"));
    r.add(D::integer("train.num_anchors", 512, "N, anchors (drafted blocks) sampled per sequence")
              .range(1, 1 << 20)
              .read_by("data anchor sampling, arena planning"));
    r.add(D::real("train.loss_decay_gamma", 7.0,
                  "position decay of the block loss, exp(-(k-1)/gamma); 0 = no decay")
              .range(0, 1e6)
              .read_by("train loss (lm_head CE weights)"));
    r.add(D::string("train.loss", "ce",
                    "block loss: ce = cross-entropy on the data's tokens; against the target's "
                    "own next-token distribution p at T=1 (costs the target's final hidden "
                    "states and more chunked LM-head passes, docs/training.md): kl = "
                    "KL(p || q_draft), rkl = KL(q || p), jsd = Jensen-Shannon, tv = |p - q|_1 / 2, "
                    "l1 = |p - q|_1; or a weighted sum sharing one weighting, e.g. 0.1*ce+0.9*l1")
              .read_by("train loss (lm_head_ce / lm_head_kl), arena planning"));
    r.add(D::enumeration("train.loss_weighting", "decay", {"decay", "dpace"},
                         "how block slots are weighed: decay = loss mask x "
                         "exp(-(k-1)/train.loss_decay_gamma); dpace = D-PACE, each slot by the "
                         "draft's expected accepted length from it on (needs train.loss=ce; one "
                         "more LM-head forward per step; docs/training.md)")
              .read_by("train loss (lm_head_ce weights, dpace_weights)"));
    r.add(D::real("train.dpace_alpha", 0.5,
                  "D-PACE floor: a slot's survival factor is (1-alpha) q + alpha, q the draft's "
                  "probability of the data's token; in (0, 1] (1 = uniform credit)")
              .range(0, 1)
              .read_by("train loss (dpace_weights)"));
    r.add(D::real("train.selector_loss_alpha", 1.0,
                  "DFlash2 drafters: loss = unary + alpha * selector K-way cross-entropy "
                  "(docs/training.md); 0 = unary only (the selector's metrics are still "
                  "reported); ignored for DFlash drafters")
              .range(0, 1e6)
              .read_by("train loss (selector_loss)"));
    r.add(D::real("train.dspark_ce_alpha", 0.1,
                  "DSpark drafters: weight of the cross-entropy on the data's next tokens")
              .range(0, 1e6)
              .read_by("train loss (dspark_block_loss)"));
    r.add(D::real("train.dspark_l1_alpha", 0.9,
                  "DSpark drafters: weight of |q - p|_1 against the target's distribution")
              .range(0, 1e6)
              .read_by("train loss (dspark_block_loss)"));
    r.add(D::real("train.dspark_confidence_alpha", 1.0,
                  "DSpark drafters: weight of the confidence head's BCE against "
                  "clamp(1 - |q - p|_1 / 2, 0, 1)")
              .range(0, 1e6)
              .read_by("train loss (dspark_block_loss)"));
    r.add(D::enumeration("train.documents", "packed", {"packed", "separate"},
                         "samples packed into one training sequence: packed = one stream "
                         "(the target, anchors and drafter context cross sample boundaries); "
                         "separate = the target runs each sample alone from position 0, every "
                         "block lies inside one sample and sees only that sample's context")
              .read_by("data anchor sampling, drafter attention mask"));
    r.add(D::integer("train.accumulation", 1, "micro-steps accumulated per optimizer step")
              .range(1, 65536)
              .read_by("train::Trainer"));
    r.add(D::integer("train.checkpoint_every", 1000, "steps between checkpoints; 0 = only at end")
              .range(0, kBig)
              .read_by("train checkpoints"));
    r.add(D::boolean("train.shard_optimizer_state", false,
                     "with several workers, each keeps the AdamW moments of 1/W of the parameters "
                     "and updates only those (ZeRO stage 1): gradients are reduce-scattered, the "
                     "updated weights all-gathered; saves 8 bytes per parameter x (W-1)/W on each "
                     "worker. Checkpoints hold every moment, so a run resumes either way")
              .read_by("train::Trainer"));
    r.add(D::integer("train.replica_check_every", 0,
                     "with several workers, steps between checks that every worker holds the "
                     "same weights (a hash per replica); the start and first step of a run are "
                     "always checked; 0 = only then")
              .range(0, kBig)
              .read_by("train::Trainer"));
    r.add(D::integer("train.eval_every", 1000, "steps between evaluations; 0 = never")
              .range(0, kBig)
              .read_by("train::Trainer"));
    r.add(D::integer("train.log_every", 10, "steps between metric log lines")
              .range(1, kBig)
              .read_by("train metrics"));
    r.add(D::string("train.output_dir", "runs/drafter", "run directory: checkpoints, metrics")
              .read_by("dflash train, train checkpoints"));
    r.add(D::string("train.eval_data", "", "held-out dataset directory; empty = no evaluation")
              .read_by("dflash train, dflash pretrain (--eval-data overrides)"));
    r.add(D::integer("train.eval_sequences", 64, "held-out sequences per evaluation; 0 = all")
              .range(0, kBig)
              .read_by("train::Trainer evaluation"));
    r.add(
        D::string("train.eval_prompts", "",
                  "prompts JSONL decoded speculatively at each evaluation (real tau); empty = off")
            .read_by("dflash train evaluation (--eval-prompts overrides)"));
    r.add(D::integer("train.eval_prompt_count", 8,
                     "prompts of train.eval_prompts used per evaluation")
              .range(1, kBig)
              .read_by("dflash train evaluation"));
    r.add(D::integer("train.eval_max_new_tokens", 64, "tokens generated per evaluation prompt")
              .range(1, 1 << 24)
              .read_by("dflash train evaluation"));
    r.add(D::boolean("train.keep_best", false,
                     "drafters: keep the checkpoint of the best evaluation by train.best_metric "
                     "in <run>/best/ (outside the checkpoint-<step> series; <run>/best/best.json "
                     "names its step and value, which a resumed run keeps)")
              .read_by("train::Trainer evaluation"));
    r.add(D::enumeration("train.best_metric", "tau_greedy", {"tau_greedy", "tau_prob"},
                         "what train.keep_best maximises: tau_greedy = held-out acceptance length "
                         "of greedy verification, tau_prob = its expectation for sampled drafts "
                         "(docs/training.md \"Metrics\")")
              .read_by("train::Trainer evaluation"));
    r.add(D::integer("train.lm_head_chunk", 8192, "vocabulary rows per chunk of the fused CE or KL")
              .range(1, 1 << 24)
              .read_by("backend lm_head_ce / lm_head_kl ops, arena planning"));
}

void add_pretrain(Registry& r) {
    r.add(D::real("pretrain.lr", 3e-3, "peak learning rate of target pretraining")
              .range(0, 10)
              .read_by("dflash pretrain"));
    r.add(D::enumeration("pretrain.architecture", "qwen3", {"qwen3", "llama"},
                         "layout of the small target: qwen3 (q/k norm) or llama (none)")
              .read_by("dflash pretrain, dflash init target (target config)"));
    r.add(D::enumeration("pretrain.rope_scaling", "none", {"none", "llama3"},
                         "RoPE scaling of the small target (llama3: Llama-3.1's parameters)")
              .read_by("dflash pretrain, dflash init target (target config)"));
    r.add(D::real("pretrain.rope_theta", 10000.0, "RoPE base of the small target")
              .range(1, 1e9)
              .read_by("dflash pretrain, dflash init target (target config)"));
    r.add(D::boolean("pretrain.tie_word_embeddings", false,
                     "the small target's lm_head shares the embedding matrix")
              .read_by("dflash pretrain, dflash init target (target config)"));
    r.add(D::integer("pretrain.hidden_size", 256, "D of the small target")
              .range(8, 65536)
              .read_by("dflash pretrain (target config)"));
    r.add(D::integer("pretrain.num_layers", 4, "L of the small target")
              .range(1, 256)
              .read_by("dflash pretrain (target config)"));
    r.add(D::integer("pretrain.num_heads", 4, "H of the small target")
              .range(1, 256)
              .read_by("dflash pretrain (target config)"));
    r.add(D::integer("pretrain.num_kv_heads", 2, "Hkv of the small target")
              .range(1, 256)
              .read_by("dflash pretrain (target config)"));
    r.add(D::integer("pretrain.head_dim", 64, "Dh of the small target")
              .range(1, 1024)
              .read_by("dflash pretrain (target config)"));
    r.add(D::integer("pretrain.intermediate_size", 768, "SwiGLU width of the small target")
              .range(1, 1 << 20)
              .read_by("dflash pretrain (target config)"));
    r.add(D::integer("pretrain.max_length", 256, "tokens per pretraining sequence")
              .range(8, 1 << 20)
              .read_by("dflash pretrain, data loader"));
    r.add(D::integer("pretrain.epochs", 1, "passes over the pretraining data")
              .range(1, 100000)
              .read_by("dflash pretrain"));
    r.add(D::integer("pretrain.max_steps", 0, "pretraining optimizer steps; 0 = from epochs")
              .range(0, kBig)
              .read_by("dflash pretrain"));
    r.add(D::boolean("pretrain.loss_on_prompt", true,
                     "next-token loss on every token (false: only where the data's mask is 1)")
              .read_by("dflash pretrain"));
    r.add(D::string("pretrain.output_dir", "runs/target", "where the pretrained target is written")
              .read_by("dflash pretrain"));
}

void add_infer(Registry& r) {
    r.add(D::real("infer.temperature", 0.0, "sampling temperature; 0 = greedy")
              .range(0, 100)
              .read_by("infer samplers"));
    r.add(D::integer("infer.top_k", 0, "keep the k most likely tokens; 0 = off")
              .range(0, 1 << 24)
              .read_by("infer samplers"));
    // The nucleus always holds at least the most likely token, so a mass of 0 means nothing; the
    // lower bound is the smallest mass the samplers take (as a float), which keeps that one token.
    r.add(D::real("infer.top_p", 1.0,
                  "nucleus sampling mass: keep the most likely tokens until their probability "
                  "reaches it; 1 = off, 1e-6 = only the most likely token")
              .range(1e-6, 1)
              .read_by("infer samplers"));
    r.add(D::integer("infer.max_new_tokens", 256, "tokens generated per prompt")
              .range(1, 1 << 24)
              .read_by("dflash generate, dflash bench, infer engine"));
    r.add(D::integer("infer.max_context", 0,
                     "tokens a sequence may reach (prompt + output); 0 = the target's "
                     "max_position_embeddings")
              .range(0, 1 << 26)
              .read_by("infer engine (dflash generate, dflash bench, data regenerate)"));
    r.add(D::integer("infer.block_size", 0, "draft block size; 0 = the drafter's")
              .range(0, 256)
              .read_by("infer engine"));
    r.add(D::enumeration("infer.cpu_draft_precision", "auto", {"auto", "f32", "bf16"},
                         "precision of the drafter's products on the CPU: bf16 (weights and "
                         "inputs rounded, fp32 sums: AMX tiles, AVX512-BF16 or AVX-512F) or f32; "
                         "auto = bf16 where the CPU has AVX-512, else f32. The output is the "
                         "target's either way; only which tokens are proposed can change")
              .read_by("infer engine (dflash generate, dflash bench, training evaluation)"));
    r.add(D::boolean("infer.cpu_target_panels", true,
                     "on the CPU (AVX2 or AVX-512), multiply the target's decode and verify "
                     "through fp32 copies of its linear weights laid out in panels (one more "
                     "copy of those weights in memory, made only when it takes at most 1 GiB; a "
                     "verify row keeps a decode row's bits); false = read the weights in place")
              .read_by("infer engine (dflash generate, dflash bench, training evaluation)"));
    r.add(D::boolean("infer.cuda_fused_decode", true,
                     "on CUDA, run the target's decode steps and verify blocks (at most 16 "
                     "tokens) through the fused decode-block kernels: q/k/v in one product, head "
                     "norms + RoPE + cache write in one kernel, the residual adds and SwiGLU in "
                     "the products' epilogues; false = the general kernels (a verify row keeps a "
                     "decode row's bits either way)")
              .read_by("infer engine (dflash generate, dflash bench, training evaluation)"));
    r.add(D::boolean("infer.draft_sampling", false,
                     "sample draft tokens (instead of argmax) when temperature > 0")
              .read_by("infer engine"));
    r.add(D::real("infer.dspark_confidence_threshold", 0.0,
                  "DSpark drafters: verify only the drafts before the first slot whose "
                  "confidence falls below this; 0 = verify every draft")
              .range(0, 1)
              .read_by("infer engine"));
    r.add(D::integer("infer.seed", 0, "seed of the sampler's random stream")
              .range(0, kMaxI64)
              .read_by("infer samplers"));
}

void add_chat(Registry& r) {
    r.add(D::enumeration("chat.template", "auto",
                         {"auto", "qwen3", "qwen3_5", "llama3", "llama3.1", "harmony"},
                         "chat template of an HF tokenizer; auto = the one config.json's "
                         "model_type implies (qwen3_5 for Qwen3.5), else recognise "
                         "tokenizer_config.json's")
              .read_by("HF tokenizer: data prepare, generate --chat, prompts, tokenize --chat"));
    r.add(D::boolean("chat.enable_thinking", true,
                     "Qwen3 / Qwen3.5 thinking mode (false: the prompt ends with an empty think "
                     "block; true: Qwen3.5's prompt opens one)")
              .read_by("qwen3 and qwen3_5 chat templates"));
    r.add(D::string("chat.date_string", "26 Jul 2024", "Llama-3.1 template's 'Today Date'")
              .read_by("llama3.1 chat template"));
    r.add(D::enumeration("chat.reasoning_effort", "medium", {"low", "medium", "high"},
                         "harmony (gpt-oss) system turn's 'Reasoning:'")
              .read_by("harmony chat template"));
    r.add(D::string("chat.current_date", "2025-08-05",
                    "harmony system turn's 'Current date:' (fixed, so prepared data is "
                    "reproducible; gpt-oss's own template writes today's)")
              .read_by("harmony chat template"));
    r.add(D::string("chat.model_identity",
                    "You are ChatGPT, a large language model trained by OpenAI.",
                    "harmony system turn's first line (gpt-oss's template default)")
              .read_by("harmony chat template"));
}

void add_data_and_demo(Registry& r) {
    r.add(D::boolean("data.shuffle", true, "shuffle sequences each epoch (seeded by runtime.seed)")
              .read_by("data loader"));
    r.add(D::boolean("data.pack", true, "pack several sequences into one training row")
              .read_by("data loader"));
    r.add(D::boolean("demo.quick", false, "a smaller, faster demo (CI smoke runs)")
              .read_by("dflash demo"));
    r.add(
        D::string("demo.output_dir", "dflash-demo", "where the demo writes target, drafter, report")
            .read_by("dflash demo"));
}

}  // namespace

Registry make_registry() {
    Registry r;
    add_runtime(r);
    add_launch(r);
    add_cuda_graphs(r);
    add_drafter(r);
    add_train_optimizer(r);
    add_train(r);
    add_pretrain(r);
    add_infer(r);
    add_chat(r);
    add_data_and_demo(r);
    return r;
}

}  // namespace dflash::config
