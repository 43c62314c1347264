// The CPU backend's device collectives (Backend::make_device_collectives): the worker's host
// communicator itself, since a CPU tensor is host memory. Every sum is the communicator's
// (rank-order, so the bits of one whole sum whatever the buckets); reduce-scatter is a whole sum;
// all-gather is one broadcast per worker; overlapped sums run at once. It gives the trainer's
// device-side paths (gradient buckets, sharded optimizer state inside the update) a run in CI,
// where there is no GPU. Tested by tests/train/optimizer_shard_test.cpp and
// tests/train/gradient_bucket_test.cpp.
#include "backend/cpu/host_collectives.h"

#include "comm/communicator.h"
#include "core/error.h"

namespace dflash::cpu {
namespace {

class HostCollectives final : public DeviceCollectives {
  public:
    explicit HostCollectives(Communicator& comm) : comm_(comm) {}

    void sum(const Tensor& t) override {
        check(t, "all-reduce");
        comm_.all_reduce_sum(t.f32(), static_cast<size_t>(t.numel()));
    }
    void reduce_scatter(const Tensor& t, int64_t chunk) override {
        check_chunks(t, chunk, "reduce-scatter");
        sum(t);
    }
    void all_gather(const Tensor& t, int64_t chunk) override {
        check_chunks(t, chunk, "all-gather");
        for (int r = 0; r < comm_.size(); ++r)
            comm_.broadcast(t.f32() + r * chunk, static_cast<size_t>(chunk) * sizeof(float), r);
    }
    void sum_overlapped(const Tensor& t) override { sum(t); }
    void join() override {}
    // The host communicator's own abort (WorldGroup::abort) wakes its waits.
    void abort(const std::string&) override {}
    void stop() override {}
    std::string describe() const override {
        return fmt::format("the host communicator, {} ranks", comm_.size());
    }

  private:
    void check(const Tensor& t, const char* what) const {
        DF_CHECK(t.device().kind == DeviceKind::cpu && t.dtype() == DType::f32,
                 "cpu {} works on f32 host tensors, got {}", what, t.describe());
    }
    void check_chunks(const Tensor& t, int64_t chunk, const char* what) const {
        check(t, what);
        DF_CHECK(chunk >= 0 && t.numel() == chunk * comm_.size(),
                 "cpu {} of chunks of {} over {} workers needs {} elements, got {}", what, chunk,
                 comm_.size(), chunk * comm_.size(), t.numel());
    }

    Communicator& comm_;
};

}  // namespace

std::unique_ptr<DeviceCollectives> make_host_collectives(Communicator& comm) {
    return std::make_unique<HostCollectives>(comm);
}

}  // namespace dflash::cpu
