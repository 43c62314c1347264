// Workspace: the memory of one step (docs/design.md "Memory and threads"), in three
// regions carved by bump allocation and never reallocated:
//   - device scratch (`take`): activations and op temporaries;
//   - inputs (`input`): pinned host memory the caller fills, mirrored on the device and sent in one
//     upload (`send_inputs`): ids, positions, labels, weights, anchors;
//   - outputs (`output`): device memory ops write, mirrored in host memory and fetched in one
//     download (`fetch_outputs`): loss sums, accuracy counts, argmaxes.
// Its size comes from a dry run: the same step code runs once against a planning workspace (which
// hands out tensors without device memory) and a planning backend (whose ops do nothing); the
// high-water marks become the live workspace's capacities. A step that needs more than was planned
// fails with an error naming the request, never a silent reallocation, so addresses stay stable
// (what graph capture needs). Tested by tests/backend/workspace_test.cpp.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "backend/device_tensor.h"
#include "core/tensor.h"

namespace dflash {

class Backend;

// Byte counts of the three regions.
struct WorkspacePlan {
    size_t device_bytes = 0;
    size_t input_bytes = 0;
    size_t output_bytes = 0;
    WorkspacePlan& merge(const WorkspacePlan& o);  // element-wise max
};

class Workspace {
  public:
    // A workspace that records sizes only: `take` returns tensors that must never be read or
    // written (run the step with a planning backend); `input`/`output` host sides are real memory
    // so host code runs unchanged.
    static Workspace planning(DeviceRef device);
    Workspace() = default;  // no memory: every request fails
    // A live workspace with the capacities of `plan` on be's device.
    Workspace(Backend& be, const WorkspacePlan& plan);
    Workspace(Workspace&&) noexcept;
    Workspace& operator=(Workspace&&) noexcept;
    ~Workspace();

    struct Staged {
        Tensor host;    // host memory (pinned on CUDA)
        Tensor device;  // the same bytes' place on the device
    };

    Tensor take(Shape shape, DType dtype);
    Staged input(Shape shape, DType dtype);
    Staged output(Shape shape, DType dtype);
    // Uploads the inputs taken since the last send, in one copy.
    void send_inputs();
    // Downloads every output taken since the last reset, in one copy, and waits for it.
    void fetch_outputs();

    // Stack discipline: everything taken after `mark()` is given back by `release(m)`.
    struct Mark {
        size_t device = 0, input = 0, output = 0;
    };
    Mark mark() const;
    void release(const Mark& m);
    void reset() { release(Mark{}); }
    // Gives back device scratch taken after m, keeping the inputs and outputs: what a recorded
    // step (Backend::run_step) does, since its staged inputs must keep their own places.
    void release_scratch(const Mark& m);
    // Waits until inputs already sent have left the staging memory, so that the next step's
    // inputs can be written there (before a recorded step, which may not synchronise).
    void settle_inputs();

    bool is_planning() const { return planning_; }
    DeviceRef device() const { return device_; }
    // The high-water marks so far (a planning run's result).
    WorkspacePlan high_water() const;
    WorkspacePlan capacity() const;

  private:
    struct Region {
        Buffer device;  // live: device memory
        Buffer host;    // live inputs/outputs: pinned host memory
        size_t capacity = 0, used = 0, high = 0;
        size_t carve(size_t bytes, const char* region, const Shape& shape, DType dtype);
    };
    Tensor device_view(const Region& r, size_t off, Shape shape, DType dtype) const;
    Tensor host_view(Region& r, size_t off, Shape shape, DType dtype);

    Backend* be_ = nullptr;
    bool planning_ = false;
    DeviceRef device_;
    Region scratch_, inputs_, outputs_;
    size_t inputs_sent_ = 0;    // inputs below this offset have been sent
    size_t in_flight_end_ = 0;  // sent input bytes [0, this) may still be in flight
    // Planning: host memory behind the staged regions, grown in blocks that never move.
    std::vector<std::unique_ptr<HostTensor>> planning_host_;
};

// Runs `step` dry (a planning backend for `be`, a planning workspace) and returns what it took.
WorkspacePlan plan_workspace(const Backend& be,
                             const std::function<void(Backend&, Workspace&)>& step);

}  // namespace dflash
