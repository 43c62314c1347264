// ModelSnapshotCopy: a training replica's weights copied into host memory for the checkpoint
// writer (WorkerTask::snapshot_model; Note [Checkpoint snapshot memory] in
// train/checkpoint_writer.h): a model of the replica's config on a host backend, made once by
// reserve and refilled from the replica by every fill. Tested by
// tests/train/checkpoint_memory_test.cpp.
#pragma once

#include <optional>

#include "backend/backend.h"
#include "core/error.h"

namespace dflash::train {

template <class Model>
class ModelSnapshotCopy {
  public:
    // The copy's memory on `host` (a CPU backend, Backend::make_host_backend of the replica's:
    // pinned on CUDA), which must outlive this object; once (later calls keep the first copy).
    void reserve(Backend& host, const Model& replica) {
        if (!copy_) copy_.emplace(host, replica.config());
    }
    bool reserved() const { return copy_.has_value(); }
    // The replica's f32 master weights copied into the reserved model now (one download, waited
    // for); the copy is valid until the next fill.
    const Model& fill(const Model& replica) {
        DF_ASSERT(copy_, "a snapshot of the weights before its memory was reserved");
        copy_->params().copy_from(replica.params());
        return *copy_;
    }

  private:
    std::optional<Model> copy_;
};

}  // namespace dflash::train
