// Drafter checkpoints (src/train/checkpoint.h): the directory layout (HF drafter files that load
// back and pass `dflash inspect`, training state, latest pointer, settings, metrics) and bitwise
// resume: k steps, then resume to 2k, equals 2k straight — every weight and moment, bit for bit.
// Checkpoints are written in the background (train/checkpoint_writer.h): training goes on while
// one is written, a checkpoint written that way resumes bitwise, and a failed write stops the run
// naming the checkpoint and the cause; a write in flight keeps the memory it reads (Note
// [Checkpoint snapshot memory]) until it is done.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "core/checkpoint_io.h"
#include "model/drafter.h"
#include "model/inspect.h"
#include "model/tensor_layout.h"
#include "support/test_util.h"
#include "train/drafter_training.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;

class DrafterCheckpoints : public test::SharedInputsTest<DrafterCheckpoints> {
  public:
    static constexpr const char* kTag = "dflash-ckpt";
    static void write_inputs(const fs::path& dir) {
        test::write_pattern_dataset(dir / "data", 24, 3);
        test::write_pattern_dataset(dir / "eval", 6, 4);
        test::write_tiny_target(dir / "target");
    }

  protected:
    static train::DrafterTrainJob job(const std::string& out) {
        return test::drafter_job(dir_->path(), out);
    }
};

TEST_F(DrafterCheckpoints, LayoutLoadsBackAndPassesInspect) {
    auto j = job("layout");
    j.eval_data_dir = *dir_ / "eval";
    const auto s = test::drafter_settings({{"train.checkpoint_every", "2"},
                                           {"train.max_steps", "5"},
                                           {"train.eval_every", "2"},
                                           {"train.log_every", "2"}});
    const train::TrainSummary sum = train_drafter_from_settings(j, s, Logger());
    const fs::path run = *dir_ / "layout";
    for (int step : {2, 4, 5}) EXPECT_TRUE(fs::is_directory(run / train::checkpoint_name(step)));
    EXPECT_EQ(sum.model_dir, run / train::checkpoint_name(5));
    EXPECT_EQ(test::read_file(run / "latest"), train::checkpoint_name(5) + "\n");
    EXPECT_EQ(train::resolve_resume_dir(run), sum.model_dir);
    EXPECT_TRUE(fs::exists(run / "settings.toml"));
    for (const auto& e : fs::directory_iterator(run))
        EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos);

    const fs::path ck = sum.model_dir;
    const auto cfg = read_json_file(ck / "config.json");
    EXPECT_EQ(cfg["architectures"][0], "DFlashDraftModel");
    EXPECT_EQ(cfg["dtype"], "bfloat16");
    EXPECT_EQ(cfg["block_size"], 4);
    EXPECT_EQ(cfg["num_hidden_layers"], 1);
    EXPECT_EQ(cfg["dflash_config"]["target_layer_ids"], nlohmann::json({1, 2}));
    EXPECT_EQ(cfg["dflash_config"]["mask_token_id"], make_byte_tokenizer()->specials().mask);

    const DrafterConfig dc = DrafterConfig::load(ck);
    const auto reader = CheckpointReader::open(ck);
    std::set<std::string> expected, found;
    for (const auto& spec : drafter_tensor_specs(dc)) expected.insert(spec.name);
    for (const auto& n : reader.names()) {
        found.insert(n);
        EXPECT_EQ(reader.dtype(n), "BF16") << n;
    }
    EXPECT_EQ(found, expected);
    EXPECT_NO_THROW(DrafterModel::load(test::host_backend(), ck));
    const InspectReport rep = inspect_directory(ck);
    EXPECT_TRUE(rep.ok()) << rep.text;
    EXPECT_EQ(rep.kind, "drafter");
    EXPECT_TRUE(has_tokenizer_spec(ck));

    const train::TrainingState st = train::read_training_state(ck);
    EXPECT_EQ(st.kind, "drafter");
    EXPECT_EQ(st.step, 5);
    EXPECT_EQ(st.total_steps, 5);
    ASSERT_EQ(st.loaders.size(), 1u);
    EXPECT_EQ(st.loaders[0].cursor, 5);  // 12 sequences per epoch, batch 1
    EXPECT_EQ(st.settings_hash, s.hash());
    const auto tensors = test::read_state_tensors(ck);
    EXPECT_EQ(tensors.size(), 3 * expected.size());  // master, adam_m, adam_v

    // metrics.jsonl: steps 1 (first), 2, 4, 5 (last), plus evaluations at 2, 4 and the end.
    std::ifstream in(run / "metrics.jsonl");
    std::string line;
    std::vector<int64_t> steps, evals;
    while (std::getline(in, line)) {
        const auto r = nlohmann::json::parse(line);
        if (r.value("eval", false)) {
            evals.push_back(r["step"]);
            EXPECT_EQ(r["acc"].size(), 3u);
            continue;
        }
        steps.push_back(r["step"]);
        for (const char* k : {"epoch", "loss", "acc", "tau_implied", "lr", "grad_norm",
                              "tokens_per_s", "elapsed_s"})
            EXPECT_TRUE(r.contains(k)) << k << " in " << line;
    }
    EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 4, 5}));
    EXPECT_EQ(evals, (std::vector<int64_t>{2, 4, 5}));
    ASSERT_TRUE(sum.final_eval.has_value());
    EXPECT_GT(sum.final_eval->loss, 0.0);
}

TEST_F(DrafterCheckpoints, ResumeIsBitwiseIdentical) {
    // 2 workers, accumulation 2: loader states of several workers and micro-steps must resume.
    const auto s = test::drafter_settings({{"train.checkpoint_every", "3"},
                                           {"train.max_steps", "6"},
                                           {"runtime.devices", "2"},
                                           {"train.accumulation", "2"}});
    const train::TrainSummary straight = train_drafter_from_settings(job("straight"), s, Logger());
    auto j = job("resumed");
    j.resume = *dir_ / "straight" / train::checkpoint_name(3);
    const train::TrainSummary resumed = train_drafter_from_settings(j, s, Logger());
    EXPECT_EQ(resumed.first_step, 4);
    EXPECT_EQ(resumed.steps, 6);
    const auto a = test::read_state_tensors(straight.model_dir);
    const auto b = test::read_state_tensors(resumed.model_dir);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, va] : a) {
        ASSERT_TRUE(b.count(name)) << name;
        const auto& vb = b.at(name);
        ASSERT_EQ(va.size(), vb.size()) << name;
        EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0) << name;
    }
    EXPECT_EQ(test::read_file(straight.model_dir / "model.safetensors"),
              test::read_file(resumed.model_dir / "model.safetensors"));
    EXPECT_DOUBLE_EQ(straight.final_loss, resumed.final_loss);
}

// Compares two checkpoints' training states and model files bit for bit.
void expect_same_checkpoint(const fs::path& a_dir, const fs::path& b_dir) {
    const auto a = test::read_state_tensors(a_dir);
    const auto b = test::read_state_tensors(b_dir);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, va] : a) {
        ASSERT_TRUE(b.count(name)) << name;
        const auto& vb = b.at(name);
        ASSERT_EQ(va.size(), vb.size()) << name;
        EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0) << name;
    }
    EXPECT_EQ(test::read_file(a_dir / "model.safetensors"),
              test::read_file(b_dir / "model.safetensors"));
}

TEST_F(DrafterCheckpoints, TrainingGoesOnWhileACheckpointIsWritten) {
    // The writer holds checkpoint 2 back until step 3 has begun: with a step that waited for the
    // write, step 3 would never begin and the wait would time out.
    std::mutex mu;
    std::condition_variable cv;
    bool step3 = false, overlapped = false;
    auto j = job("overlap");
    j.hooks.on_step_begin = [&](int, int64_t step) {
        if (step != 3) return;
        std::lock_guard lock(mu);
        step3 = true;
        cv.notify_all();
    };
    j.hooks.on_checkpoint_write = [&](const fs::path& dir) {
        if (dir.filename() != train::checkpoint_name(2)) return;
        std::unique_lock lock(mu);
        overlapped = cv.wait_for(lock, std::chrono::seconds(30), [&] { return step3; });
    };
    const auto s =
        test::drafter_settings({{"train.checkpoint_every", "2"}, {"train.max_steps", "4"}});
    const train::TrainSummary sum = train_drafter_from_settings(j, s, Logger());
    EXPECT_TRUE(overlapped);
    const fs::path run = *dir_ / "overlap";
    // The end of training waited for the last write.
    EXPECT_EQ(sum.model_dir, run / train::checkpoint_name(4));
    EXPECT_EQ(test::read_file(run / "latest"), train::checkpoint_name(4) + "\n");
    for (const auto& e : fs::directory_iterator(run))
        EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos);
    // The checkpoint written while step 3 ran holds step 2's state: resuming from it gives the
    // straight run's step 4 bit for bit.
    auto r = job("overlap-resumed");
    r.resume = run / train::checkpoint_name(2);
    const train::TrainSummary resumed = train_drafter_from_settings(r, s, Logger());
    EXPECT_EQ(resumed.first_step, 3);
    expect_same_checkpoint(sum.model_dir, resumed.model_dir);
    EXPECT_DOUBLE_EQ(sum.final_loss, resumed.final_loss);
}

TEST_F(DrafterCheckpoints, AWriteInFlightKeepsItsMemory) {
    // Note [Checkpoint snapshot memory]: every checkpoint copies the state into the same host
    // memory, which the writer's thread reads. Checkpoint 2's write is held until step 4 has
    // begun and a little longer, long enough for step 4 and its checkpoint's copy to run: a
    // checkpoint that refilled the memory before waiting for the write in flight would leave step
    // 4's state in checkpoint 2. It must equal checkpoint 2 of a run that never waited.
    const auto s =
        test::drafter_settings({{"train.checkpoint_every", "2"}, {"train.max_steps", "4"}});
    std::mutex mu;
    std::condition_variable cv;
    bool step4 = false;
    auto j = job("held");
    j.hooks.on_step_begin = [&](int, int64_t step) {
        if (step != 4) return;
        std::lock_guard lock(mu);
        step4 = true;
        cv.notify_all();
    };
    j.hooks.on_checkpoint_write = [&](const fs::path& dir) {
        if (dir.filename() != train::checkpoint_name(2)) return;
        std::unique_lock lock(mu);
        cv.wait_for(lock, std::chrono::seconds(30), [&] { return step4; });
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
    };
    train_drafter_from_settings(j, s, Logger());
    const train::TrainSummary plain = train_drafter_from_settings(job("unheld"), s, Logger());
    EXPECT_TRUE(step4);
    expect_same_checkpoint(*dir_ / "held" / train::checkpoint_name(2),
                           *dir_ / "unheld" / train::checkpoint_name(2));
    expect_same_checkpoint(*dir_ / "held" / train::checkpoint_name(4), plain.model_dir);
}

TEST_F(DrafterCheckpoints, AFailedWriteStopsTheRun) {
    auto j = job("write-fails");
    j.hooks.on_checkpoint_write = [](const fs::path& dir) {
        if (dir.filename() == train::checkpoint_name(4)) throw Error("no space left (injected)");
    };
    const auto s =
        test::drafter_settings({{"train.checkpoint_every", "2"}, {"train.max_steps", "8"}});
    try {
        train_drafter_from_settings(j, s, Logger());
        FAIL() << "the run ended although a checkpoint could not be written";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("writing the checkpoint"), std::string::npos) << m;
        EXPECT_NE(m.find(train::checkpoint_name(4)), std::string::npos) << m;
        EXPECT_NE(m.find("no space left (injected)"), std::string::npos) << m;
    }
    const fs::path run = *dir_ / "write-fails";
    // The checkpoint before it stands and is still the latest; the failed one left nothing.
    EXPECT_TRUE(fs::is_directory(run / train::checkpoint_name(2)));
    for (int step : {4, 6, 8}) EXPECT_FALSE(fs::exists(run / train::checkpoint_name(step)));
    EXPECT_EQ(test::read_file(run / "latest"), train::checkpoint_name(2) + "\n");
}

TEST_F(DrafterCheckpoints, ResumeErrorsAreClear) {
    auto j = job("bad-resume");
    j.resume = *dir_ / "data";  // not a checkpoint, no latest
    try {
        train_drafter_from_settings(j, test::drafter_settings(), Logger());
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("neither a checkpoint"), std::string::npos)
            << e.what();
    }
    // A fresh run into a directory that holds checkpoints is refused.
    train_drafter_from_settings(job("twice"), test::drafter_settings(), Logger());
    try {
        train_drafter_from_settings(job("twice"), test::drafter_settings(), Logger());
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--resume"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace dflash
