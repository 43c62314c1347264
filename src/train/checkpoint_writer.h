// CheckpointWriter: writes training checkpoints on a thread of its own while training goes on
// (docs/training.md "The run directory"). The step only copies the state into host memory (a
// Job: the weights' snapshot, the gathered AdamW moments, the training state; Note [Checkpoint
// snapshot memory]); the writer then writes the files with write_checkpoint (a temporary
// directory renamed into place, so a crash mid-write never leaves a checkpoint that looks
// complete). One write at a time: a new job waits for the previous one, whose error, if it
// failed, is thrown there instead; the step loop also asks after every step (check) and the end
// of training waits (wait). Owned by the trainer's first worker; no globals. Tested by
// tests/train/checkpoint_test.cpp (resume from checkpoints written this way, slow and failed
// writes) and tests/train/checkpoint_memory_test.cpp (the memory reused).
#pragma once

#include <atomic>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "backend/backend.h"
#include "core/logging.h"
#include "core/tensor.h"
#include "model/params.h"
#include "train/checkpoint.h"

namespace dflash::train {

// Note [Checkpoint snapshot memory]. A checkpoint stops training only while its state is copied
// into host memory: the f32 master weights and both AdamW moments, 12 bytes a parameter (12.6 GB
// for a 1.05B drafter). Into pageable memory that copy ran at about 1.8 GB/s on an H200 (the step
// after a checkpoint took 7.36 s instead of 0.24; docs/performance.md): the driver stages it
// through bounce buffers, and the moments' fresh pages were faulted in on top. So the memory is a
// CPU backend's made by the training backend's make_host_backend (pinned on CUDA; plain memory on
// the CPU), allocated once by the worker that writes the checkpoints at its setup (every run ends
// with a checkpoint, so the first one would pay the allocation otherwise) and refilled by every
// checkpoint: the weights into the task's copy of the model (ModelSnapshotCopy,
// WorkerTask::reserve_snapshot), the moments into CheckpointMemory::m and v. Each copy is one
// device-to-host copy on the training stream that the step waits for. The writer's thread then
// reads that memory while training goes on, so a checkpoint waits for the previous write before it
// refills it. Not done: a copy overlapped with the next step (its optimizer update, inside the
// recorded step, would have to wait for it on the device).
struct CheckpointMemory {
    // For a ParamSet of `numel` elements on `device`.
    CheckpointMemory(Backend& device, int64_t numel);
    CheckpointMemory(const CheckpointMemory&) = delete;
    CheckpointMemory& operator=(const CheckpointMemory&) = delete;

    std::unique_ptr<Backend> host;  // device.make_host_backend(1); the weights' copy lives here
    DeviceTensor m, v;              // f32 [numel]: the gathered AdamW moments, on `host`
};

class CheckpointWriter {
  public:
    struct Job {
        std::filesystem::path run_dir;
        TrainingState state;
        // The weights to write (f32 masters, in host memory) and what writes the model files from
        // them, and the AdamW moments (f32 [numel] views of host memory, CheckpointMemory's): all
        // must stay untouched until the write is done (the next submit or wait).
        const ParamSet* params = nullptr;
        std::function<void(const std::filesystem::path&)> save_model;
        Tensor m, v;
        double copy_seconds = 0;  // how long the step waited for the copy (for the log line)
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
