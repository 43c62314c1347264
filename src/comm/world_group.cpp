// Threads, then processes, then threads again (see world_group.h). Tested by
// tests/comm/world_group_test.cpp.
#include "comm/world_group.h"

#include "core/error.h"

namespace dflash {
namespace detail {

class WorldComm final : public Communicator {
  public:
    WorldComm(WorldGroup& g, Communicator& threads, TcpGroup* tcp, int local)
        : g_(g), threads_(threads), tcp_(tcp), local_(local) {}
    int rank() const override { return g_.global_rank(local_); }
    int size() const override { return g_.size(); }
    void all_reduce_sum(float* data, size_t n) override { reduce(data, n); }
    void all_reduce_sum(double* data, size_t n) override { reduce(data, n); }
    void broadcast(void* data, size_t bytes, int root) override {
        DF_CHECK(root >= 0 && root < g_.size(), "broadcast root={} but the run has ranks 0..{}",
                 root, g_.size() - 1);
        const int root_process = root / g_.local_size();
        const int root_local = root % g_.local_size();
        if (!tcp_) {
            threads_.broadcast(data, bytes, root_local);
            return;
        }
        // The root's process first moves the data to its leader; the leaders exchange it; every
        // leader hands it to its threads. (Elsewhere the first step is a harmless copy.)
        threads_.broadcast(data, bytes, g_.process_rank() == root_process ? root_local : 0);
        if (local_ == 0) tcp_->broadcast(data, bytes, root_process);
        threads_.broadcast(data, bytes, 0);
    }
    void barrier() override {
        threads_.barrier();
        if (tcp_ && local_ == 0) tcp_->barrier();
        threads_.barrier();
    }

  private:
    template <typename T>
    void reduce(T* data, size_t n) {
        threads_.all_reduce_sum(data, n);
        if (!tcp_) return;
        if (local_ == 0) tcp_->all_reduce_sum(data, n);
        threads_.broadcast(data, n * sizeof(T), 0);
    }

    WorldGroup& g_;
    Communicator& threads_;
    TcpGroup* tcp_;
    int local_;
};

}  // namespace detail

WorldGroup::WorldGroup(int local_workers, std::unique_ptr<TcpGroup> processes)
    : local_(local_workers), tcp_(std::move(processes)), threads_(local_workers) {
    // One process alone needs no sockets: the TcpGroup of a world of 1 is dropped.
    if (tcp_ && tcp_->size() == 1) tcp_.reset();
    for (int w = 0; w < local_workers; ++w)
        comms_.push_back(
            std::make_unique<detail::WorldComm>(*this, threads_.rank(w), tcp_.get(), w));
}

WorldGroup::~WorldGroup() = default;

Communicator& WorldGroup::local(int local) {
    DF_CHECK(local >= 0 && local < local_, "worker {} requested but this process has 0..{}", local,
             local_ - 1);
    return *comms_[static_cast<size_t>(local)];
}

void WorldGroup::abort(const std::string& reason) {
    threads_.abort(reason);
    if (tcp_) tcp_->abort(reason);
}

}  // namespace dflash
