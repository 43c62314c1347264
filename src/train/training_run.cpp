// A training command's preamble (see training_run.h). Tested by tests/train/resume_test.cpp,
// checkpoint_test.cpp and pretrain_test.cpp.
#include "train/training_run.h"

#include "core/error.h"
#include "train/checkpoint.h"

namespace dflash::train {
namespace {

// The checkpoint a request resumes; the data, which every run needs, is asked for first.
std::optional<std::filesystem::path> resume_dir(const RunRequest& request) {
    DF_CHECK(!request.data_dir.empty(),
             "no training data: give --data DIR (`dflash data prepare`)");
    if (request.resume.empty()) return std::nullopt;
    return resolve_resume_dir(request.resume);
}

config::Settings layered_settings(const RunRequest& request, const RunSettings& settings,
                                  const std::optional<std::filesystem::path>& resume_from,
                                  const Logger& log) {
    // A resume continues the checkpoint's run: its settings, except what is given explicitly.
    if (!resume_from) return settings.given;
    return settings_for_resume(settings.given, *resume_from, request.shape_keys, log);
}

}  // namespace

TrainingRun::TrainingRun(const RunRequest& request, const RunSettings& settings, const Logger& log)
    : kind_(request.kind),
      resume_from_(resume_dir(request)),
      settings_(layered_settings(request, settings, resume_from_, log)),
      options_(settings.read(settings_)) {
    const bool target = kind_ == "target";
    run_dir_ = pick_run_dir(request.output_dir, resume_from_,
                            target ? options_.pretrain.output_dir : options_.train.output_dir);
    // Before the models are read: a second writer is refused at once.
    lock_ = lock_run_dir(run_dir_, kind_, resume_from_.has_value(), options_.launch.rank);
    train_.emplace(ShardedDataset::open(request.data_dir));
    eval_ = open_eval_data(request.eval_data_dir, options_.train.eval_data);
}

TrainerSpec TrainingRun::spec(const TrainHooks& hooks) const {
    TrainerSpec spec;
    spec.kind = kind_;
    spec.train_data = &*train_;
    spec.eval_data = eval_ ? &*eval_ : nullptr;
    if (kind_ == "target") {
        const PretrainOptions& p = options_.pretrain;
        spec.max_length = p.max_length;
        spec.lr = p.lr;
        spec.epochs = p.epochs;
        spec.max_steps = p.max_steps;
    } else {
        const TrainOptions& t = options_.train;
        spec.max_length = t.max_length;
        spec.lr = t.lr;
        spec.epochs = t.epochs;
        spec.max_steps = t.max_steps;
    }
    spec.run_dir = run_dir_;
    spec.run_dir_lock = lock_ ? &*lock_ : nullptr;
    spec.resume_from = resume_from_;
    spec.hooks = hooks;
    return spec;
}

TrainSummary TrainingRun::train(const TrainerSpec& spec, const Logger& log) const {
    return run_trainer(spec, options_, settings_, log);
}

}  // namespace dflash::train
