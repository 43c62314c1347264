// Step memory in three bump-allocated regions. Tested by tests/backend/workspace_test.cpp.
#include "backend/workspace.h"

#include <algorithm>

#include "backend/backend.h"

namespace dflash {
namespace {

// 256 bytes: what cuBLASLt and 16-byte vector loads want, and a whole cache line pair on the CPU.
constexpr size_t kAlign = 256;

size_t aligned(size_t bytes) {
    return (bytes + kAlign - 1) / kAlign * kAlign;
}

// Never dereferenced: planning tensors need a non-null address so that "empty" still means empty.
char* const kPlanningBase = reinterpret_cast<char*>(kAlign);

}  // namespace

WorkspacePlan& WorkspacePlan::merge(const WorkspacePlan& o) {
    device_bytes = std::max(device_bytes, o.device_bytes);
    input_bytes = std::max(input_bytes, o.input_bytes);
    output_bytes = std::max(output_bytes, o.output_bytes);
    return *this;
}

size_t Workspace::Region::carve(size_t bytes, const char* region, const Shape& shape, DType dtype) {
    const size_t off = used;
    const size_t need = aligned(bytes);
    DF_CHECK(capacity == SIZE_MAX || off + need <= capacity,
             "workspace exhausted: {} bytes of {} for {}{} with {} of {} bytes in use; the step is "
             "larger than the one planned (a longer sequence or more anchors than the plan?)",
             bytes, region, dtype_name(dtype), shape.to_string(), used, capacity);
    used = off + need;
    high = std::max(high, used);
    return off;
}

Workspace Workspace::planning(DeviceRef device) {
    Workspace ws;
    ws.planning_ = true;
    ws.device_ = device;
    ws.scratch_.capacity = ws.inputs_.capacity = ws.outputs_.capacity = SIZE_MAX;
    return ws;
}

Workspace::Workspace(Backend& be, const WorkspacePlan& plan) : be_(&be), device_(be.device()) {
    auto make = [&](Region& r, size_t bytes, bool host) {
        r.capacity = aligned(bytes);
        if (r.capacity == 0) return;
        r.device = be.allocate(r.capacity);
        if (host) r.host = be.allocate_host(r.capacity);
    };
    make(scratch_, plan.device_bytes, false);
    make(inputs_, plan.input_bytes, true);
    make(outputs_, plan.output_bytes, true);
}

Workspace::Workspace(Workspace&&) noexcept = default;
Workspace& Workspace::operator=(Workspace&&) noexcept = default;
Workspace::~Workspace() = default;

Tensor Workspace::device_view(const Region& r, size_t off, Shape shape, DType dtype) const {
    char* base = planning_ ? kPlanningBase : static_cast<char*>(r.device.data());
    return Tensor(base + off, dtype, shape, device_);
}

Tensor Workspace::host_view(Region& r, size_t off, Shape shape, DType dtype) {
    if (planning_) {
        planning_host_.push_back(std::make_unique<HostTensor>(shape, dtype));
        return planning_host_.back()->view();
    }
    return Tensor(static_cast<char*>(r.host.data()) + off, dtype, shape);
}

Tensor Workspace::take(Shape shape, DType dtype) {
    const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
    const size_t off = scratch_.carve(bytes, "device scratch", shape, dtype);
    return device_view(scratch_, off, shape, dtype);
}

Workspace::Staged Workspace::input(Shape shape, DType dtype) {
    // Host staging memory already sent may still be in flight: wait before handing it out again.
    if (in_flight_end_ > inputs_.used) {
        // In a recorded step the earlier copy is a graph node that reads this memory at replay,
        // after the host has written the new values: refuse rather than send wrong inputs.
        DF_CHECK(!be_->recording_step(),
                 "a recorded step reuses staged input memory it has already sent (release "
                 "device scratch only, with release_scratch, inside a step)");
        be_->synchronize();
        in_flight_end_ = 0;
    }
    const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
    const size_t off = inputs_.carve(bytes, "inputs", shape, dtype);
    return {host_view(inputs_, off, shape, dtype), device_view(inputs_, off, shape, dtype)};
}

Workspace::Staged Workspace::output(Shape shape, DType dtype) {
    const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
    const size_t off = outputs_.carve(bytes, "outputs", shape, dtype);
    return {host_view(outputs_, off, shape, dtype), device_view(outputs_, off, shape, dtype)};
}

void Workspace::send_inputs() {
    if (planning_ || inputs_.used <= inputs_sent_) {
        inputs_sent_ = std::max(inputs_sent_, inputs_.used);
        return;
    }
    const auto n = static_cast<int64_t>(inputs_.used - inputs_sent_);
    const Tensor dst(static_cast<char*>(inputs_.device.data()) + inputs_sent_, DType::f32,
                     Shape{n / 4}, device_);
    const Tensor src(static_cast<char*>(inputs_.host.data()) + inputs_sent_, DType::f32,
                     Shape{n / 4});
    be_->upload(dst, src);
    inputs_sent_ = inputs_.used;
    in_flight_end_ = std::max(in_flight_end_, inputs_.used);
}

void Workspace::fetch_outputs() {
    if (planning_ || outputs_.used == 0) return;
    const auto n = static_cast<int64_t>(outputs_.used / 4);
    be_->download(Tensor(outputs_.host.data(), DType::f32, Shape{n}),
                  Tensor(outputs_.device.data(), DType::f32, Shape{n}, device_));
    in_flight_end_ = 0;  // a download waits for everything queued before it
}

Workspace::Mark Workspace::mark() const {
    return {scratch_.used, inputs_.used, outputs_.used};
}

void Workspace::release(const Mark& m) {
    DF_ASSERT(m.device <= scratch_.used && m.input <= inputs_.used && m.output <= outputs_.used,
              "workspace release to a mark above the current use");
    scratch_.used = m.device;
    inputs_.used = m.input;
    outputs_.used = m.output;
    inputs_sent_ = std::min(inputs_sent_, m.input);
    if (planning_ && m.input == 0 && m.output == 0) planning_host_.clear();
}

void Workspace::release_scratch(const Mark& m) {
    DF_ASSERT(m.device <= scratch_.used, "workspace release to a mark above the current use");
    scratch_.used = m.device;
}

void Workspace::settle_inputs() {
    if (in_flight_end_ == 0 || planning_) return;
    be_->synchronize();
    in_flight_end_ = 0;
}

WorkspacePlan Workspace::high_water() const {
    return {scratch_.high, inputs_.high, outputs_.high};
}

WorkspacePlan Workspace::capacity() const {
    return {scratch_.capacity, inputs_.capacity, outputs_.capacity};
}

WorkspacePlan plan_workspace(const Backend& be,
                             const std::function<void(Backend&, Workspace&)>& step) {
    const std::unique_ptr<Backend> planner = make_planning_backend(be);
    Workspace ws = Workspace::planning(be.device());
    step(*planner, ws);
    return ws.high_water();
}

}  // namespace dflash
