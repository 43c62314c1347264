// The training commands' settings edge (see training.h). Tested by tests/options/options_test.cpp
// and the training tests (tests/train/).
#include "options/training.h"

#include "options/chat_options.h"
#include "options/cuda_graphs_options.h"
#include "options/data_options.h"
#include "options/drafter_options.h"
#include "options/infer_options.h"
#include "options/launch_options.h"
#include "options/pretrain_options.h"
#include "options/runtime_options.h"
#include "options/train_options.h"

namespace dflash {

train::TrainingOptions training_options_from_settings(const config::Settings& s) {
    train::TrainingOptions o;
    o.runtime = runtime_options_from_settings(s);
    o.graphs = graph_options_from_settings(s);
    o.launch = launch_from_settings(s);
    o.train = train_options_from_settings(s);
    o.pretrain = pretrain_options_from_settings(s);
    o.drafter = drafter_options_from_settings(s);
    o.data = data_options_from_settings(s);
    o.chat = chat_options_from_settings(s);
    o.infer = generate_options_from_settings(s);
    return o;
}

train::TrainSummary train_drafter_from_settings(const train::DrafterTrainJob& job,
                                                const config::Settings& settings,
                                                const Logger& log) {
    return train::run_drafter_training(job, {settings, training_options_from_settings}, log);
}

train::TrainSummary pretrain_from_settings(const train::PretrainJob& job,
                                           const config::Settings& settings, const Logger& log) {
    return train::run_pretraining(job, {settings, training_options_from_settings}, log);
}

}  // namespace dflash
