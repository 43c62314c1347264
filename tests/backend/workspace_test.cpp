// Workspace (backend/workspace.h): regions carve aligned, stable, non-overlapping tensors; a
// planning run measures exactly what the same code takes live; exhaustion is an error naming the
// request; inputs go up and outputs come down in one copy each; marks give memory back. Also the
// planning backend (does nothing, reports the real device) and DeviceTensor / to_host_f32.
#include <gtest/gtest.h>

#include <cstdint>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "support/test_util.h"

namespace dflash {
namespace {

// A little "step": two activations, staged inputs, an output, a temporary given back.
void step(Backend& be, Workspace& ws, int64_t n) {
    Workspace::Staged in = ws.input({n}, DType::i32);
    for (int64_t i = 0; i < n; ++i) in.host.i32()[i] = static_cast<int32_t>(3 * i + 1);
    ws.send_inputs();
    const Tensor a = ws.take({n, 3}, DType::f32);
    const Workspace::Mark m = ws.mark();
    const Tensor tmp = ws.take({n * 7}, DType::f32);
    be.fill(tmp, 2.0f);
    ws.release(m);
    be.fill(a, 1.5f);
    Workspace::Staged out = ws.output({n}, DType::f32);
    be.copy(out.device, a.reshape({n * 3}).rows(0, n));
    be.add_inplace(out.device, a.reshape({n * 3}).rows(n, 2 * n), 1.0f);
}

TEST(Workspace, PlanningMeasuresWhatTheLiveRunTakes) {
    auto be = make_cpu_backend(1);
    const WorkspacePlan plan =
        plan_workspace(*be, [](Backend& b, Workspace& ws) { step(b, ws, 100); });
    EXPECT_GE(plan.device_bytes, 100 * 3 * 4 + 100 * 7 * 4);
    EXPECT_GE(plan.input_bytes, 100 * 4);
    EXPECT_GE(plan.output_bytes, 100 * 4);
    Workspace ws(*be, plan);
    EXPECT_NO_THROW(step(*be, ws, 100));
    ws.fetch_outputs();
    // Smaller steps fit the same plan; a larger one is refused with the request named.
    ws.reset();
    EXPECT_NO_THROW(step(*be, ws, 10));
    ws.reset();
    const std::string err = test::error_of([&] { step(*be, ws, 1000); });
    EXPECT_TRUE(test::has(err, "workspace exhausted")) << err;
    EXPECT_TRUE(test::has(err, "longer sequence")) << err;
}

TEST(Workspace, TensorsAreAlignedStableAndDisjoint) {
    auto be = make_cpu_backend(1);
    Workspace ws(*be, WorkspacePlan{1 << 16, 1 << 12, 1 << 12});
    const Tensor a = ws.take({3}, DType::f32), b = ws.take({5}, DType::bf16);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 256, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 256, 0u);
    EXPECT_GE(static_cast<char*>(b.data()) - static_cast<char*>(a.data()), 12);
    const Workspace::Mark m = ws.mark();
    const Tensor c = ws.take({9}, DType::f32);
    ws.release(m);
    const Tensor d = ws.take({9}, DType::f32);
    EXPECT_EQ(c.data(), d.data());  // the same place again: addresses are stable step to step
    ws.reset();
    EXPECT_EQ(ws.take({3}, DType::f32).data(), a.data());
}

TEST(Workspace, InputsAndOutputsCrossInOneCopyEach) {
    auto be = make_cpu_backend(1);
    Workspace ws(*be, WorkspacePlan{1 << 12, 1 << 12, 1 << 12});
    Workspace::Staged x = ws.input({4}, DType::f32), y = ws.input({2}, DType::i32);
    for (int i = 0; i < 4; ++i) x.host.f32()[i] = static_cast<float>(i) + 0.5f;
    y.host.i32()[0] = 7;
    y.host.i32()[1] = -3;
    // Before the send the device side holds nothing of it.
    EXPECT_NE(x.device.f32()[3], 3.5f);
    ws.send_inputs();
    EXPECT_EQ(x.device.f32()[3], 3.5f);
    EXPECT_EQ(y.device.i32()[1], -3);
    Workspace::Staged o = ws.output({2}, DType::f32);
    be->fill(o.device, 4.25f);
    EXPECT_NE(o.host.f32()[1], 4.25f);
    ws.fetch_outputs();
    EXPECT_EQ(o.host.f32()[1], 4.25f);
}

TEST(Workspace, PlanningTensorsAreNeverEmpty) {
    Workspace ws = Workspace::planning(DeviceRef{});
    const Tensor t = ws.take({4, 4}, DType::f32);
    EXPECT_FALSE(t.empty());  // model code tests "empty" for optional tensors
    EXPECT_TRUE(ws.is_planning());
    EXPECT_EQ(ws.high_water().device_bytes, 256u);
}

TEST(PlanningBackend, ReportsTheRealDeviceAndRefusesToAllocate) {
    auto be = make_cpu_backend(1);
    auto pb = make_planning_backend(*be);
    EXPECT_EQ(pb->device(), be->device());
    EXPECT_EQ(pb->compute_dtype(), be->compute_dtype());
    EXPECT_TRUE(test::has(pb->name(), "planning"));
    EXPECT_THROW(pb->allocate(16), Error);
    EXPECT_EQ(pb->lm_head_ce_workspace(5, 8, 100, 30), be->lm_head_ce_workspace(5, 8, 100, 30));
}

TEST(DeviceTensor, ZeroFilledAndRoundTripsThroughTheHost) {
    auto be = make_cpu_backend(1);
    DeviceTensor t(*be, {3, 5}, DType::bf16);
    const HostTensor zero = to_host_f32(*be, t);
    for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(zero.f32()[i], 0.0f);
    HostTensor h({3, 5});
    for (int64_t i = 0; i < 15; ++i) h.f32()[i] = 0.1f * static_cast<float>(i) - 0.7f;
    from_host_f32(*be, t, h.view());
    const HostTensor back = to_host_f32(*be, t);
    for (int64_t i = 0; i < 15; ++i)
        EXPECT_EQ(back.f32()[i], bf16_to_f32(f32_to_bf16(h.f32()[i]))) << i;
}

}  // namespace
}  // namespace dflash
