// CheckpointWriter: writes training checkpoints on a thread of its own while training goes on
// (docs/training.md "The run directory"). The step only copies the state into host memory (a
// Job: the weights' snapshot, the gathered AdamW moments, the training state); the writer then
// writes the files with write_checkpoint (a temporary directory renamed into place, so a crash
// mid-write never leaves a checkpoint that looks complete). One write at a time: a new job waits
// for the previous one, whose error, if it failed, is thrown there instead; the step loop also
// asks after every step (check) and the end of training waits (wait). Owned by the trainer's
// first worker; no globals. Tested by tests/train/checkpoint_writer_test.cpp and
// tests/train/checkpoint_test.cpp (resume from checkpoints written this way).
#pragma once

#include <atomic>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "core/logging.h"
#include "core/tensor.h"
#include "model/params.h"
#include "train/checkpoint.h"

namespace dflash::train {

class CheckpointWriter {
  public:
    struct Job {
        std::filesystem::path run_dir;
        TrainingState state;
        // The weights to write (f32 masters, in host memory) and what writes the model files from
        // them; both must stay untouched until the write is done (the next submit or wait).
        const ParamSet* params = nullptr;
        std::function<void(const std::filesystem::path&)> save_model;
        HostTensor m, v;  // AdamW moments, f32 [numel]
        // Tests: called on the writer's thread before anything is written (failures, delays).
        std::function<void(const std::filesystem::path&)> before_write;
    };

    explicit CheckpointWriter(Logger log) : log_(std::move(log)) {}
    CheckpointWriter(const CheckpointWriter&) = delete;
    CheckpointWriter& operator=(const CheckpointWriter&) = delete;
    // Waits for a write in flight, so that it is finished (or its temporary directory removed)
    // before the run ends; its error, if any, is dropped (another one is on its way already).
    ~CheckpointWriter();

    // Waits for the previous write (throwing its error), then starts writing `job`.
    void submit(Job job);
    // Waits for the write in flight; throws its error.
    void wait();
    // Throws the error of a write that has finished, without waiting for one still running.
    void check();
    bool busy() const { return thread_.joinable() && !done_.load(); }

  private:
    void join_and_rethrow();

    Logger log_;
    std::thread thread_;
    std::atomic<bool> done_{false};
    std::exception_ptr error_;  // of the last write, set by its thread before done_
    std::string name_;          // the directory of the checkpoint in flight (for messages)
};

}  // namespace dflash::train
