// Shared by the training tests: a tiny learnable dataset written with ShardWriter, a tiny target
// model directory, a suite base whose tests share those inputs, jobs and settings for fast runs,
// and helpers that read a checkpoint's training state.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/registry.h"
#include "config/settings.h"
#include "core/safetensors.h"
#include "data/shard.h"
#include "model/target.h"
#include "options/training.h"
#include "support/test_util.h"
#include "support/tiny_models.h"
#include "tokenizer/model_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/drafter_training.h"

namespace dflash::test {

// Samples of a learnable language: a short prompt (loss mask 0), then a response (mask 1) that
// repeats a period-5 pattern from a random phase, so the next tokens are predictable from context.
inline void write_pattern_dataset(const std::filesystem::path& dir, int64_t samples, uint64_t seed,
                                  int64_t response_len = 24) {
    std::filesystem::create_directories(dir);
    const auto tok = make_byte_tokenizer();
    ShardWriter w(dir / "shard-00000.dfshard", tok->name(), tok->vocab_size());
    Rng rng(seed);
    const std::string alphabet = "abcde";
    for (int64_t i = 0; i < samples; ++i) {
        Encoded e;
        e.tokens.push_back(tok->specials().bos);
        e.loss_mask.push_back(0);
        for (int k = 0; k < 3; ++k) {
            e.tokens.push_back(static_cast<int32_t>('p' + rng.below(4)));
            e.loss_mask.push_back(0);
        }
        const uint64_t phase = rng.below(5);
        for (int64_t k = 0; k < response_len; ++k) {
            e.tokens.push_back(static_cast<int32_t>(alphabet[(phase + k) % 5]));
            e.loss_mask.push_back(1);
        }
        w.add(e);
    }
    w.finish();
}

// A tiny random Qwen3 target (5 layers, so the default feature layers are [1, 2]) for the byte
// tokenizer, written as an HF directory with its tokenizer description.
inline void write_tiny_target(const std::filesystem::path& dir, uint64_t seed = 7) {
    const auto tok = make_byte_tokenizer();
    TargetConfig c;
    c.model_type = "qwen3";
    c.hidden_size = 32;
    c.intermediate_size = 48;
    c.num_hidden_layers = 5;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.vocab_size = tok->vocab_size();
    c.max_position_embeddings = 512;
    c.rope.theta = 10000.0;
    c.tie_word_embeddings = false;
    c.qk_norm = true;
    c.bos_token_id = tok->specials().bos;
    c.eos_token_id = tok->specials().eos;
    TargetModel::random(test::host_backend(), c, seed, 0.2f).save(dir);
    save_tokenizer_spec(dir, *tok);
}

// Base of a test suite whose tests share one directory of inputs (datasets, targets), written
// once before the first test by Suite::write_inputs(dir) because they are slow to make. Suite
// declares, publicly, `static constexpr const char* kTag` (the directory's name prefix) and
// write_inputs. A template so that each suite has its own directory.
template <class Suite>
class SharedInputsTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new TempDir(Suite::kTag);
        Suite::write_inputs(dir_->path());
    }
    static void TearDownTestSuite() {
        delete dir_;
        dir_ = nullptr;
    }
    static inline TempDir* dir_ = nullptr;
};

// A drafter training job on dir/target and dir/data writing to dir/out, with no signal handler
// and no progress line: one test process runs many jobs, and ctest output is not a terminal.
inline train::DrafterTrainJob drafter_job(const std::filesystem::path& dir,
                                          const std::string& out) {
    train::DrafterTrainJob j;
    j.target_dir = dir / "target";
    j.data_dir = dir / "data";
    j.output_dir = dir / out;
    j.hooks.handle_signals = false;
    j.hooks.progress = false;
    return j;
}

inline std::shared_ptr<const config::Registry> registry() {
    return std::make_shared<const config::Registry>(config::make_registry());
}

// Settings of a fast drafter run; `more` overrides on top.
inline config::Settings drafter_settings(
    std::vector<std::pair<std::string, std::string>> more = {}) {
    std::vector<std::pair<std::string, std::string>> kv = {
        {"runtime.threads", "1"},        {"runtime.devices", "1"},
        {"runtime.backend", "cpu"},      {"train.batch_size", "1"},
        {"train.max_steps", "6"},        {"train.lr", "3e-3"},
        {"train.warmup_ratio", "0.2"},   {"train.log_every", "1"},
        {"train.checkpoint_every", "0"}, {"train.eval_every", "0"},
        {"train.max_length", "64"},      {"train.num_anchors", "6"},
        {"train.lm_head_chunk", "100"},  {"drafter.num_layers", "1"},
        {"drafter.block_size", "4"},     {"train.loss_decay_gamma", "4"}};
    kv.insert(kv.end(), more.begin(), more.end());
    return config::Settings(registry()).with_overrides(kv);
}

// Every tensor of a checkpoint's training_state.safetensors, as f32 copies.
inline std::map<std::string, std::vector<float>> read_state_tensors(
    const std::filesystem::path& ckpt) {
    const auto f = SafetensorsFile::open(ckpt / train::kTrainingStateTensors);
    std::map<std::string, std::vector<float>> out;
    for (const auto& name : f.names()) {
        HostTensor t = f.read_f32(name);
        out[name].assign(t.f32(), t.f32() + t.numel());
    }
    return out;
}

// Overwrites, in place, the first value of the first tensor of a checkpoint's
// training_state.safetensors whose name starts with `prefix` with NaN (what a run that diverged
// between its last finite step and the checkpoint could leave); returns the tensor's name.
inline std::string poison_state_tensor(const std::filesystem::path& ckpt,
                                       const std::string& prefix) {
    const std::filesystem::path path = ckpt / train::kTrainingStateTensors;
    std::string name;
    uint64_t begin = 0;
    {
        const auto f = SafetensorsFile::open(path);
        for (const auto& n : f.names()) {
            if (n.rfind(prefix, 0) != 0) continue;
            name = n;
            begin = f.entry(n).begin;
            EXPECT_EQ(f.entry(n).dtype, "F32") << n;
            break;
        }
    }
    EXPECT_FALSE(name.empty()) << "no tensor " << prefix << "* in " << path;
    // The data section starts after the 8-byte little-endian header length and the header.
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header = 0;
    io.read(reinterpret_cast<char*>(&header), sizeof header);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    io.seekp(static_cast<std::streamoff>(sizeof header + header + begin));
    io.write(reinterpret_cast<const char*>(&nan), sizeof nan);
    EXPECT_TRUE(io.good()) << path;
    return name;
}

// Largest, over the tensors whose names start with `prefix`, of max|a-b| / max|b| within the
// tensor (each tensor against its own scale, with no floor: AdamW moments are far below 1, where
// an absolute tolerance would accept anything). The two states must hold the same tensors.
inline double max_state_rel_diff(const std::map<std::string, std::vector<float>>& a,
                                 const std::map<std::string, std::vector<float>>& b,
                                 const std::string& prefix) {
    double worst = 0;
    EXPECT_EQ(a.size(), b.size());
    for (const auto& [name, va] : a) {
        if (name.rfind(prefix, 0) != 0) continue;
        const auto it = b.find(name);
        if (it == b.end()) {
            ADD_FAILURE() << "missing " << name;
            continue;
        }
        double scale = 0, diff = 0;
        for (size_t i = 0; i < va.size(); ++i) {
            scale = std::max(scale, static_cast<double>(std::abs(it->second[i])));
            diff = std::max(diff, static_cast<double>(std::abs(va[i] - it->second[i])));
        }
        // An all-zero tensor must be matched exactly.
        worst = std::max(worst, scale > 0 ? diff / scale : (diff > 0 ? INFINITY : 0.0));
    }
    return worst;
}

// Every tensor of two checkpoints' training states (masters and moments) equal bit for bit.
inline void expect_same_state(const std::filesystem::path& ckpt_a,
                              const std::filesystem::path& ckpt_b) {
    const auto sa = read_state_tensors(ckpt_a);
    const auto sb = read_state_tensors(ckpt_b);
    ASSERT_EQ(sa.size(), sb.size());
    for (const auto& [name, va] : sa) {
        const auto it = sb.find(name);
        ASSERT_NE(it, sb.end()) << name;
        ASSERT_EQ(va.size(), it->second.size()) << name;
        EXPECT_EQ(std::memcmp(va.data(), it->second.data(), va.size() * sizeof(float)), 0) << name;
    }
}

// A drafter run of drafter_settings(kv) in dir/out (resuming `resume` when given), with the loss
// and gradient norm of every step.
struct RecordedRun {
    train::TrainSummary summary;
    std::vector<double> losses;      // per step
    std::vector<double> grad_norms;  // per step, before clipping
};

inline RecordedRun train_recorded(const std::filesystem::path& dir, const std::string& out,
                                  const std::vector<std::pair<std::string, std::string>>& kv,
                                  const std::filesystem::path& resume = {}) {
    train::DrafterTrainJob job = drafter_job(dir, out);
    job.resume = resume;
    RecordedRun r;
    job.hooks.on_record = [&r](const train::StepRecord& rec) {
        if (rec.eval) return;
        r.losses.push_back(rec.loss);
        r.grad_norms.push_back(rec.grad_norm);
    };
    r.summary = train_drafter_from_settings(job, drafter_settings(kv), Logger());
    return r;
}

}  // namespace dflash::test
