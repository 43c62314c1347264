// Resuming from a checkpoint (see resume.h). Tested by tests/train/resume_test.cpp,
// checkpoint_test.cpp, pretrain_test.cpp and trainer_test.cpp.
#include "train/resume.h"

#include <fmt/ranges.h>

#include "config/dump.h"
#include "config/toml_file.h"
#include "core/error.h"

namespace dflash::train {
namespace {

// The data positions of this run's workers, from a checkpoint that may have been written by
// another number of workers. Worker r's next sequence is the epoch's global sequence
// cursor x world + r (Note [Loader plan]), so W' workers at one cursor c have read c x W'
// sequences, and W workers continue exactly there at cursor c x W' / W when W divides it.
std::vector<LoaderState> resume_positions(const TrainingState& rs, const ResumeTarget& spec,
                                          const LoopOptions& o) {
    const auto old_world = static_cast<int>(rs.loaders.size());
    DF_CHECK(old_world >= 1, "--resume: the checkpoint records no data position");
    if (old_world == o.world) return rs.loaders;
    const LoaderState at = rs.loaders[0];
    for (int r = 1; r < old_world; ++r) {
        const LoaderState& l = rs.loaders[static_cast<size_t>(r)];
        DF_CHECK(l.epoch == at.epoch && l.cursor == at.cursor,
                 "--resume with {} workers instead of the checkpoint's {} needs its workers at "
                 "one data position, but worker 0 is at sequence {} of epoch {} and worker {} at "
                 "{} of epoch {}; resume with {} workers",
                 o.world, old_world, at.cursor, at.epoch, r, l.cursor, l.epoch, old_world);
    }
    LoopOptions old = o;
    old.world = old_world;
    const PackedLoader old_plan(*spec.train_data, loader_options(spec.max_length, old, 0));
    int64_t epoch = at.epoch, read = at.cursor * old_world;
    if (at.cursor >= old_plan.sequences_in_epoch(at.epoch)) {  // the epoch was read to its end
        ++epoch;
        read = 0;
    }
    DF_CHECK(read % o.world == 0,
             "--resume: the checkpoint's {} workers had read {} sequences of epoch {}, which {} "
             "workers ({} process(es) x runtime.devices {}) cannot continue exactly, as {} does "
             "not divide {}; use a worker count that divides {}, or the checkpoint's {}",
             old_world, read, epoch, o.world, o.launch.world, o.workers, o.world, read, read,
             old_world);
    return std::vector<LoaderState>(static_cast<size_t>(o.world),
                                    LoaderState{epoch, read / o.world});
}

// The checkpoint's data positions mean something only in the data they were taken in.
void check_same_data(const TrainingState& rs, const ResumeTarget& spec, const Logger& log) {
    const DatasetIdentity now = dataset_identity(*spec.train_data);
    if (!rs.data) {
        log.warn(
            "resume: the checkpoint does not record its training data (an older dflash wrote "
            "it), so nothing checks that {} is the data it was trained on",
            now.path);
        return;
    }
    DF_CHECK(rs.data->digest == now.digest,
             "--resume: the checkpoint was trained on other data: {}, but --data is {}; its data "
             "positions mean nothing in other data. Resume with the checkpoint's data, or train "
             "on this data in a new run{}",
             rs.data->describe(), now.describe(),
             spec.kind == "drafter"
                 ? fmt::format(" starting from the checkpoint's weights (--init-drafter {})",
                               spec.checkpoint_dir.string())
                 : std::string(" (without --resume)"));
}

}  // namespace

std::vector<LoaderState> check_resume(const TrainingState& rs, const ResumeTarget& spec,
                                      const LoopOptions& o, int64_t total, const Logger& log) {
    DF_CHECK(rs.kind == spec.kind,
             "--resume: the checkpoint trains a {} but this command "
             "trains a {}",
             rs.kind, spec.kind);
    check_same_data(rs, spec, log);
    std::vector<LoaderState> positions = resume_positions(rs, spec, o);
    if (static_cast<int>(rs.loaders.size()) != o.world)
        log.info(
            "resume: {} workers continue the data position of the checkpoint's {} (epoch {}, "
            "sequence {} of each worker)",
            o.world, rs.loaders.size(), positions[0].epoch, positions[0].cursor);
    DF_CHECK(rs.step < total,
             "--resume: the checkpoint is at step {}, and the run has {} steps; "
             "raise train.max_steps (or the epochs) to train further",
             rs.step, total);
    if (rs.total_steps != total)
        log.warn(
            "resume: the run now has {} steps (the checkpoint's run had {}); the learning "
            "rate schedule changes",
            total, rs.total_steps);
    // Every worker's data position must exist in this data with these loader settings; checked
    // here, before anything in the run directory changes, rather than in the workers.
    // (Every worker's plan has the same shape, so one probe serves all.)
    PackedLoader probe(*spec.train_data, loader_options(spec.max_length, o, 0));
    for (int r = 0; r < o.world; ++r) {
        try {
            probe.set_state(positions[static_cast<size_t>(r)]);
        } catch (const Error& e) {
            DF_FAIL("--resume: worker {}'s data position does not fit this data: {}", r, e.what());
        }
    }
    check_training_state_files(spec.checkpoint_dir);
    return positions;
}

config::Settings settings_for_resume(const config::Settings& given,
                                     const std::filesystem::path& checkpoint_dir,
                                     const std::vector<std::string>& shape_keys,
                                     const Logger& log) {
    const TrainingState rs = read_training_state(checkpoint_dir);
    const std::string name = (checkpoint_dir / kTrainingStateJson).string();
    std::vector<config::Assignment> saved;
    try {
        saved = config::parse_toml_text(given.registry(), rs.settings_toml, name);
    } catch (const Error& e) {
        DF_FAIL("--resume: the settings saved in {} cannot be used: {}", name, e.what());
    }
    auto is_shape_key = [&](const std::string& key) {
        for (const auto& k : shape_keys)
            if (key == k || (k.ends_with('.') && key.starts_with(k))) return true;
        return false;
    };
    std::vector<config::Assignment> inherited;
    std::vector<std::string> changed_shape, overridden;
    for (auto& a : saved) {
        // How the checkpoint's run was launched says nothing about how this one is.
        if (a.key.starts_with("launch.")) continue;
        if (given.source(a.key) == "default") {
            inherited.push_back(std::move(a));
            continue;
        }
        if (given.value(a.key) == a.value) continue;
        const std::string d = fmt::format("{}={} ({}; the checkpoint has {})", a.key,
                                          config::display_value(given.value(a.key)),
                                          given.source(a.key), config::display_value(a.value));
        (is_shape_key(a.key) ? changed_shape : overridden).push_back(d);
    }
    DF_CHECK(changed_shape.empty(),
             "--resume: the model's shape is fixed by the checkpoint, but {}; drop these "
             "settings to resume, or start a new run (without --resume) to train another shape",
             fmt::join(changed_shape, ", "));
    for (const auto& d : overridden) log.warn("resume: {} overrides the checkpoint's setting", d);
    return given.with(inherited);
}

}  // namespace dflash::train
