// In-process collectives over shared memory: a generation-counting barrier plus per-rank published
// buffer pointers. Tested by tests/comm/in_process_test.cpp.
#include "comm/in_process.h"

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace dflash {
namespace detail {

namespace {

enum class Op { barrier, reduce_f32, reduce_f64, broadcast };

// What one rank contributes to the collective in flight.
struct Slot {
    Op op = Op::barrier;
    void* data = nullptr;
    size_t n = 0;  // elements for reductions, bytes for broadcast
    int root = -1;
};

std::string describe(const Slot& s) {
    switch (s.op) {
        case Op::barrier:
            return "barrier()";
        case Op::reduce_f32:
            return fmt::format("all_reduce_sum(float*, n={})", s.n);
        case Op::reduce_f64:
            return fmt::format("all_reduce_sum(double*, n={})", s.n);
        case Op::broadcast:
            return fmt::format("broadcast(bytes={}, root={})", s.n, s.root);
    }
    return "?";
}

bool same_call(const Slot& a, const Slot& b) {
    return a.op == b.op && a.n == b.n && a.root == b.root;
}

}  // namespace

struct InProcessState {
    explicit InProcessState(int n) : size(n), slots(static_cast<size_t>(n)) {}

    // Publishes this rank's slot (if any) and blocks until every rank has arrived. The last to
    // arrive checks, under the lock, that all ranks are in the same collective. Throws once the
    // group is aborted, including for ranks already waiting.
    void arrive_and_wait(int rank, const Slot* slot) {
        std::unique_lock lock(mu);
        throw_if_aborted(rank);
        if (slot) slots[static_cast<size_t>(rank)] = *slot;
        const uint64_t gen = generation;
        if (++arrived == size) {
            if (slot) {
                if (std::string bad = mismatch(); !bad.empty()) {
                    aborted = true;
                    reason = std::move(bad);
                    cv.notify_all();
                    throw_if_aborted(rank);
                }
            }
            arrived = 0;
            ++generation;
            cv.notify_all();
            return;
        }
        cv.wait(lock, [&] { return generation != gen || aborted; });
        if (generation == gen) throw_if_aborted(rank);
    }

    void throw_if_aborted(int rank) const {
        if (aborted)
            throw Error(fmt::format("in-process collective on rank {} of {} aborted: {}", rank,
                                    size, reason));
    }

    void abort(const std::string& why) {
        std::lock_guard lock(mu);
        if (aborted) return;
        aborted = true;
        reason = why;
        cv.notify_all();
    }

    // Every rank must be in the same collective with the same sizes: a mismatch is a bug in the
    // caller that would otherwise corrupt memory or hang. Empty when all agree.
    std::string mismatch() const {
        const Slot& first = slots[0];
        for (int k = 1; k < size; ++k) {
            const Slot& other = slots[static_cast<size_t>(k)];
            if (!same_call(first, other))
                return fmt::format(
                    "collective mismatch: rank 0 called {} but rank {} called {}; every rank must "
                    "call the same collectives, with the same sizes, in the same order",
                    describe(first), k, describe(other));
        }
        // A shared buffer would be summed into itself: the result would depend on timing.
        if (first.op != Op::reduce_f32 && first.op != Op::reduce_f64) return {};
        if (first.n == 0) return {};
        for (int k = 1; k < size; ++k)
            for (int j = 0; j < k; ++j)
                if (slots[static_cast<size_t>(k)].data == slots[static_cast<size_t>(j)].data)
                    return fmt::format(
                        "all_reduce_sum: ranks {} and {} passed the same buffer; each rank needs "
                        "its own",
                        j, k);
        return {};
    }

    const int size;
    std::mutex mu;
    std::condition_variable cv;
    int arrived = 0;
    uint64_t generation = 0;
    bool aborted = false;
    std::string reason;
    // Written by each rank under `mu` when it enters a collective; read by all between the
    // collective's two barriers, when nobody writes them.
    std::vector<Slot> slots;
};

class InProcessComm final : public Communicator {
  public:
    InProcessComm(InProcessState& st, int rank) : st_(st), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return st_.size; }
    void all_reduce_sum(float* data, size_t n) override { reduce(Op::reduce_f32, data, n); }
    void all_reduce_sum(double* data, size_t n) override { reduce(Op::reduce_f64, data, n); }
    void broadcast(void* data, size_t bytes, int root) override;
    void barrier() override {
        const Slot slot{Op::barrier, nullptr, 0, -1};
        st_.arrive_and_wait(rank_, &slot);
    }

  private:
    template <typename T>
    void reduce(Op op, T* data, size_t n);

    InProcessState& st_;
    int rank_;
};

// Each rank owns the slice [n*r/N, n*(r+1)/N): it sums that slice over all ranks in rank order
// 0..N-1 into rank 0's buffer, then copies it to every other rank. Each element is therefore
// always computed as ((x0 + x1) + x2) + ... whichever thread runs first: the same bits every run.
template <typename T>
void InProcessComm::reduce(Op op, T* data, size_t n) {
    DF_CHECK(data != nullptr || n == 0, "all_reduce_sum on rank {}: null buffer with n={}", rank_,
             n);
    const Slot slot{op, data, n, -1};
    st_.arrive_and_wait(rank_, &slot);
    const size_t size = static_cast<size_t>(st_.size);
    const size_t lo = n * static_cast<size_t>(rank_) / size;
    const size_t hi = n * static_cast<size_t>(rank_ + 1) / size;
    T* acc = static_cast<T*>(st_.slots[0].data);
    for (size_t k = 1; k < size; ++k) {
        const T* src = static_cast<const T*>(st_.slots[k].data);
        for (size_t i = lo; i < hi; ++i) acc[i] += src[i];
    }
    if (hi > lo) {
        for (size_t k = 1; k < size; ++k) {
            T* dst = static_cast<T*>(st_.slots[k].data);
            std::memcpy(dst + lo, acc + lo, (hi - lo) * sizeof(T));
        }
    }
    // Nobody may return (and reuse its buffer) before every slice has been written.
    st_.arrive_and_wait(rank_, nullptr);
}

void InProcessComm::broadcast(void* data, size_t bytes, int root) {
    DF_CHECK(data != nullptr || bytes == 0, "broadcast on rank {}: null buffer with bytes={}",
             rank_, bytes);
    const Slot slot{Op::broadcast, data, bytes, root};
    st_.arrive_and_wait(rank_, &slot);
    // All ranks agreed on root, so checking it here fails on every rank alike.
    DF_CHECK(root >= 0 && root < st_.size, "broadcast root={} but the group has ranks 0..{}", root,
             st_.size - 1);
    const void* src = st_.slots[static_cast<size_t>(root)].data;
    if (rank_ != root && bytes > 0 && src != data) std::memcpy(data, src, bytes);
    st_.arrive_and_wait(rank_, nullptr);
}

}  // namespace detail

InProcessGroup::InProcessGroup(int size) {
    DF_CHECK(size >= 1, "InProcessGroup size={} but at least 1 rank is needed", size);
    state_ = std::make_unique<detail::InProcessState>(size);
    comms_.reserve(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r)
        comms_.push_back(std::make_unique<detail::InProcessComm>(*state_, r));
}

InProcessGroup::~InProcessGroup() = default;

int InProcessGroup::size() const {
    return state_->size;
}

Communicator& InProcessGroup::rank(int r) {
    DF_CHECK(r >= 0 && r < state_->size, "rank {} requested but the group has ranks 0..{}", r,
             state_->size - 1);
    return *comms_[static_cast<size_t>(r)];
}

void InProcessGroup::abort(const std::string& reason) {
    state_->abort(reason);
}

bool InProcessGroup::aborted() const {
    std::lock_guard lock(state_->mu);
    return state_->aborted;
}

}  // namespace dflash
