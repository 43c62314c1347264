// Resuming and run directories (src/train/resume.h, run_dir.h, training_run.h): `--resume` alone
// continues the checkpoint's own run (its settings, bit for bit the same result); a model-shape
// change is refused naming the keys; a refused resume changes nothing in the run directory
// (metrics.jsonl and settings.toml included), also when the training state holds NaN and
// settings are overridden; a resume on other data is refused (a moved copy is the same data); a
// fresh run into a directory with checkpoints (with or without `latest`) is refused; a second
// writer is refused naming the holder, before any model is read; a damaged training_state.json is
// a named error; `dflash inspect` reports a checkpoint's training state.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "core/dir_lock.h"
#include "support/test_util.h"
#include "train/drafter_training.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::has;

class Resume : public test::SharedInputsTest<Resume> {
  public:
    static constexpr const char* kTag = "dflash-resume";
    static void write_inputs(const fs::path& dir) {
        test::write_pattern_dataset(dir / "data", 24, 5);
        test::write_tiny_target(dir / "target");
    }

  protected:
    static train::DrafterTrainJob job(const std::string& out) {
        return test::drafter_job(dir_->path(), out);
    }
    // A finished 6-step run with checkpoints at 3 and 6, non-default settings throughout.
    static train::TrainSummary run6(const std::string& out) {
        return train_drafter_from_settings(job(out), settings6(), Logger());
    }
    static config::Settings settings6() {
        return test::drafter_settings({{"train.checkpoint_every", "3"},
                                       {"train.max_steps", "6"},
                                       {"train.max_length", "48"},
                                       {"train.lr", "2e-3"}});
    }
    // What the user types: nothing but --resume (and the thread count of this machine).
    static config::Settings given(std::vector<std::pair<std::string, std::string>> kv = {}) {
        return config::Settings(test::registry()).with_overrides(kv);
    }
};

// Every file of a directory tree with its content, for "nothing changed" checks.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file() && e.path().filename() != kDirLockFile)
            out[fs::relative(e.path(), dir).string()] = test::read_file(e.path());
    return out;
}

TEST_F(Resume, ResumeAloneContinuesTheCheckpointsRun) {
    const train::TrainSummary straight = run6("straight");
    auto j = job("continued");
    j.resume = *dir_ / "straight" / train::checkpoint_name(3);
    const train::TrainSummary resumed = train_drafter_from_settings(j, given(), Logger());
    EXPECT_EQ(resumed.first_step, 4);
    EXPECT_EQ(resumed.total_steps, 6);  // not the default's epochs
    const auto a = test::read_state_tensors(straight.model_dir);
    const auto b = test::read_state_tensors(resumed.model_dir);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, va] : a)
        EXPECT_EQ(std::memcmp(va.data(), b.at(name).data(), va.size() * sizeof(float)), 0) << name;
    EXPECT_TRUE(has(test::read_file(*dir_ / "continued" / "settings.toml"), "max_length = 48"));
}

TEST_F(Resume, AnExplicitSettingWinsAndIsLogged) {
    run6("override");
    auto j = job("");
    j.output_dir.clear();
    j.resume = *dir_ / "override" / train::checkpoint_name(3);
    auto sink = LogSink::capturing(LogLevel::info);
    const train::TrainSummary r =
        train_drafter_from_settings(j, given({{"train.max_steps", "8"}}), Logger(sink, ""));
    EXPECT_EQ(r.total_steps, 8);
    std::string log;
    for (const auto& l : sink->captured()) log += l + "\n";
    EXPECT_TRUE(has(log, "train.max_steps=8 (override; the checkpoint has 6) overrides")) << log;
}

TEST_F(Resume, AShapeChangeIsRefusedNamingTheKeysAndChangesNothing) {
    run6("shape");
    const fs::path run = *dir_ / "shape";
    const auto before = snapshot(run);
    auto j = job("shape");
    j.resume = run;
    const std::string e = error_of([&] {
        train_drafter_from_settings(
            j, given({{"drafter.block_size", "8"}, {"drafter.num_layers", "2"}}), Logger());
    });
    EXPECT_TRUE(has(e, "the model's shape is fixed by the checkpoint")) << e;
    EXPECT_TRUE(has(e, "drafter.block_size=8 (override; the checkpoint has 4)")) << e;
    EXPECT_TRUE(has(e, "drafter.num_layers=2 (override; the checkpoint has 1)")) << e;
    EXPECT_EQ(snapshot(run), before);
    // The same values as the checkpoint's are no change.
    EXPECT_NO_THROW(train::settings_for_resume(given({{"drafter.block_size", "4"}}),
                                               run / train::checkpoint_name(6), {"drafter."},
                                               Logger()));
}

TEST_F(Resume, ARefusedResumeLeavesTheRunDirectoryAsItWas) {
    run6("refused");
    const fs::path run = *dir_ / "refused";
    const fs::path ck3 = run / train::checkpoint_name(3);
    // metrics.jsonl holds steps 4..6 after checkpoint 3: a resume from 3 that went ahead would
    // drop them. First the training state is damaged, then the worker count cannot continue it.
    test::write_file(ck3 / train::kTrainingStateTensors, "not a safetensors file");
    const auto before = snapshot(run);
    auto j = job("refused");
    j.resume = ck3;
    EXPECT_TRUE(has(error_of([&] { train_drafter_from_settings(j, given(), Logger()); }),
                    "training_state.safetensors"));
    EXPECT_EQ(snapshot(run), before);
    // Checkpoint 6, sound, but its one worker read 6 sequences, which 4 cannot continue.
    j.resume = run;
    const std::string e = error_of([&] {
        train_drafter_from_settings(j, given({{"runtime.devices", "4"}, {"train.max_steps", "9"}}),
                                    Logger());
    });
    EXPECT_TRUE(has(e, "had read 6 sequences of epoch 0, which 4 workers")) << e;
    EXPECT_EQ(snapshot(run), before);
}

TEST_F(Resume, NonFiniteTrainingStateIsRefusedBeforeAnythingIsWritten) {
    run6("nonfinite");
    const fs::path run = *dir_ / "nonfinite";
    const fs::path ck3 = run / train::checkpoint_name(3);
    const std::string poisoned = test::poison_state_tensor(ck3, "adam_m.");
    const auto before = snapshot(run);
    auto j = job("nonfinite");
    j.resume = ck3;
    // An override would be written into the run's settings.toml if the resume went that far.
    const std::string e = error_of([&] {
        train_drafter_from_settings(j, given({{"train.max_steps", "8"}}), Logger());
    });
    EXPECT_TRUE(has(e, "NaN or infinite")) << e;
    EXPECT_TRUE(has(e, poisoned)) << e;
    EXPECT_EQ(snapshot(run), before);
}

TEST_F(Resume, OtherDataIsRefusedAndAMovedCopyIsTheSameData) {
    run6("data-change");
    const fs::path run = *dir_ / "data-change";
    // As many samples as the training data, so every data position would fit.
    test::write_pattern_dataset(*dir_ / "other-data", 24, 6);
    const auto before = snapshot(run);
    auto j = job("data-change");
    j.resume = run / train::checkpoint_name(3);
    j.data_dir = *dir_ / "other-data";
    const std::string e = error_of([&] { train_drafter_from_settings(j, given(), Logger()); });
    EXPECT_TRUE(has(e, "the checkpoint was trained on other data")) << e;
    EXPECT_TRUE(has(e, (*dir_ / "data").string())) << e;
    EXPECT_TRUE(has(e, (*dir_ / "other-data").string())) << e;
    EXPECT_TRUE(has(e, "--init-drafter")) << e;
    EXPECT_EQ(snapshot(run), before);
    // The same shards in another directory are the same data.
    fs::copy(*dir_ / "data", *dir_ / "data-copy", fs::copy_options::recursive);
    j.data_dir = *dir_ / "data-copy";
    EXPECT_EQ(train_drafter_from_settings(j, given(), Logger()).first_step, 4);
}

TEST_F(Resume, InspectReportsTheTrainingState) {
    run6("inspected");
    const fs::path ck3 = *dir_ / "inspected" / train::checkpoint_name(3);
    const std::string digest = train::dataset_identity(ShardedDataset::open(*dir_ / "data")).digest;
    auto res = test::run_dflash("inspect --no-tensors " + ck3.string());
    EXPECT_EQ(res.exit_code, 0) << res.output;
    EXPECT_TRUE(has(res.output, "training state: drafter, step 3 of 6")) << res.output;
    EXPECT_TRUE(has(res.output, "digest " + digest)) << res.output;
    EXPECT_TRUE(has(res.output, "finite:      yes")) << res.output;
    EXPECT_TRUE(has(res.output, "status:        OK")) << res.output;
    const std::string poisoned = test::poison_state_tensor(ck3, "master.");
    res = test::run_dflash("inspect --no-tensors " + ck3.string());
    EXPECT_EQ(res.exit_code, 1) << res.output;
    EXPECT_TRUE(has(res.output, "finite:      no")) << res.output;
    EXPECT_TRUE(has(res.output, "tensor '" + poisoned + "'")) << res.output;
    EXPECT_TRUE(has(res.output, "status:        BROKEN")) << res.output;
}

TEST_F(Resume, AFreshRunIntoCheckpointsIsRefusedWithOrWithoutLatest) {
    run6("fresh");
    const fs::path run = *dir_ / "fresh";
    EXPECT_TRUE(has(error_of([&] { run6("fresh"); }), "already holds checkpoints"));
    fs::remove(run / train::kLatestFile);
    const auto before = snapshot(run);
    EXPECT_TRUE(has(error_of([&] { run6("fresh"); }), "already holds checkpoints"));
    EXPECT_EQ(snapshot(run), before);
}

TEST_F(Resume, ASecondWriterIsRefusedNamingTheHolder) {
    const DirLock held = DirLock::acquire(*dir_ / "held", "run directory", "another run");
    const std::string e = error_of([&] { run6("held"); });
    EXPECT_TRUE(has(e, "is in use by pid " + std::to_string(::getpid()) + " (another run)")) << e;
    EXPECT_FALSE(fs::exists(*dir_ / "held" / "settings.toml"));
}

TEST_F(Resume, TheRunDirectoryIsCheckedBeforeTheModelsAreRead) {
    // A missing target would be the first error if the models were read before the lock.
    const DirLock held = DirLock::acquire(*dir_ / "early", "run directory", "another run");
    auto j = job("early");
    j.target_dir = *dir_ / "no-such-target";
    const std::string e = error_of([&] { train_drafter_from_settings(j, settings6(), Logger()); });
    EXPECT_TRUE(has(e, "is in use by pid")) << e;
}

TEST(TrainingState, DamagedFieldsAreNamedErrors) {
    train::TrainingState s;
    s.kind = "drafter";
    s.step = 3;
    s.total_steps = 6;
    s.loaders = {{0, 3}};
    const auto good = train::training_state_to_json(s);
    EXPECT_NO_THROW(train::training_state_from_json(good));
    auto j = good;
    j["step"] = -3;
    EXPECT_TRUE(has(error_of([&] { train::training_state_from_json(j); }), "\"step\" is -3"));
    j = good;
    j["total_steps"] = 2;
    EXPECT_TRUE(has(error_of([&] { train::training_state_from_json(j); }), "\"total_steps\" is 2"));
    j = good;
    j["kind"] = "teapot";
    EXPECT_TRUE(has(error_of([&] { train::training_state_from_json(j); }), "\"teapot\""));
    j = good;
    j["loaders"][0]["cursor"] = -1;
    EXPECT_FALSE(error_of([&] { train::training_state_from_json(j); }).empty());
}

TEST(TrainingState, TheDataIdentityRoundTripsAndMayBeAbsent) {
    train::TrainingState s;
    s.kind = "target";
    s.step = 1;
    s.total_steps = 2;
    s.loaders = {{0, 1}};
    // Written by a dflash that did not record the data: read without one.
    EXPECT_FALSE(train::training_state_from_json(train::training_state_to_json(s)).data);
    s.data = train::DatasetIdentity{"0123456789abcdef", "/data", 24, 672, 1};
    const train::TrainingState back =
        train::training_state_from_json(train::training_state_to_json(s));
    ASSERT_TRUE(back.data);
    EXPECT_EQ(back.data->describe(), s.data->describe());
    auto j = train::training_state_to_json(s);
    j["data"].erase("digest");
    EXPECT_TRUE(has(error_of([&] { train::training_state_from_json(j); }), "\"digest\""));
}

}  // namespace
}  // namespace dflash
