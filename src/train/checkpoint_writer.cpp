// The background checkpoint writer and its host memory (checkpoint_writer.h). Tested by
// tests/train/checkpoint_test.cpp and tests/train/checkpoint_memory_test.cpp.
#include "train/checkpoint_writer.h"

#include <chrono>

#include "core/error.h"

namespace dflash::train {

CheckpointMemory::CheckpointMemory(Backend& device, int64_t numel)
    : host(device.make_host_backend(1)),
      m(*host, {numel}, DType::f32),
      v(*host, {numel}, DType::f32) {}

CheckpointWriter::~CheckpointWriter() {
    if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::submit(Job job) {
    wait();
    name_ = (job.run_dir / checkpoint_name(job.state.step)).string();
    done_ = false;
    error_ = nullptr;
    thread_ = std::thread([this, job = std::move(job)] {
        const auto t0 = std::chrono::steady_clock::now();
        try {
            if (job.before_write) job.before_write(job.run_dir / checkpoint_name(job.state.step));
            const std::filesystem::path dir =
                write_checkpoint(job.run_dir, job.state, *job.params, job.m, job.v, job.save_model);
            log_.info("checkpoint: {} (copied in {:.2f} s, written in the background in {:.1f} s)",
                      dir.string(), job.copy_seconds,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        } catch (...) {
            error_ = std::current_exception();
        }
        done_ = true;
    });
}

void CheckpointWriter::wait() {
    if (thread_.joinable()) join_and_rethrow();
}

void CheckpointWriter::check() {
    if (thread_.joinable() && done_.load()) join_and_rethrow();
}

void CheckpointWriter::join_and_rethrow() {
    thread_.join();
    if (!error_) return;
    const std::exception_ptr e = std::exchange(error_, nullptr);
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& ex) {
        // The kind is kept (a full disk is the user's to fix; a bug stays a bug).
        throw_error(error_kind(ex),
                    fmt::format("writing the checkpoint '{}' failed (the checkpoints before it "
                                "are intact): {}",
                                name_, ex.what()),
                    dynamic_cast<const Error*>(&ex) ? dynamic_cast<const Error*>(&ex)->where()
                                                    : std::string());
    }
}

}  // namespace dflash::train
