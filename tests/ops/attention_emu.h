// A CPU emulator for the CUDA attention kernels (Note [Attention kernels on the CPU] in
// src/backend/cuda/kernels/attention_mma.cuh), used by tests/ops/attention_emu_test.cpp and
// tests/ops/moe_emu_test.cpp, which include this header and then the kernels' .cu files.
//
// Each CUDA thread of a block runs as a fiber on its own stack; the fibers of a block
// run one at a time and switch only where a thread must wait for others: __syncthreads, warp
// collectives (ldmatrix, mma.sync, shuffles, __syncwarp) and nothing else. A collective completes
// when every live lane of the warp has arrived with the same operation; the last lane to arrive
// computes every lane's result from the PTX ISA fragment layouts. cp.async copies are queued per
// thread and performed when the issuing thread waits for their group (or at issue, by choice), so
// a kernel that reads a tile before waiting for it sees stale bytes. Shared memory starts filled
// with NaN-like garbage, accesses are bounds-checked, and source reads of cp.async must fall in
// buffers the test registered.
//
// No mutable globals: a fiber finds its own state from its stack pointer (stacks are aligned
// blocks whose lowest bytes point at the thread's state), a launch owns its blocks, and the
// launchers' stream argument carries the test's Device.
#pragma once

#define DF_ATTN_EMULATE 1

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

// ---- CUDA spellings the kernels use (internal linkage: the library's CUDA objects have their
// own) --------------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __syncthreads() ::dflash::cuda::attn_emu::syncthreads()
#define __syncwarp(...) ::dflash::cuda::attn_emu::syncwarp()
#define __shfl_xor_sync(mask, v, o) ::dflash::cuda::attn_emu::shfl_xor((v), (o))
#define __match_any_sync(mask, v) ::dflash::cuda::attn_emu::match_any(v)
#define __any_sync(mask, p) ::dflash::cuda::attn_emu::any(p)
#define __popc(x) __builtin_popcount(x)
#define __ldg(p) (*(p))
#define threadIdx (::dflash::cuda::attn_emu::self().thread_idx)
#define blockIdx (::dflash::cuda::attn_emu::self().block->idx)
#define blockDim (::dflash::cuda::attn_emu::self().block->dim)
#define gridDim (::dflash::cuda::attn_emu::self().block->grid)

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct float2 {
    float x, y;
};
static inline float2 make_float2(float x, float y) {
    return {x, y};
}
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct __nv_bfloat162 {
    uint16_t x, y;
};
static inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
    return {dflash::f32_to_bf16(lo), dflash::f32_to_bf16(hi)};
}
static inline float2 __bfloat1622float2(__nv_bfloat162 v) {
    return {dflash::bf16_to_f32(v.x), dflash::bf16_to_f32(v.y)};
}

struct CUstream_st;

#if defined(__x86_64__)
// A fiber switch that saves only what the ABI asks a callee to keep (rbx, rbp, r12-r15, the
// SSE and x87 control words): swapcontext also saves the signal mask with a system call, which
// made the emulator several times slower. df_emu_switch(&save, next) stores the current stack
// pointer in save and continues on the stack `next`. Weak: every test file that includes the
// emulator (attention_emu_test.cpp, moe_emu_test.cpp) emits the same copy into one executable.
extern "C" void df_emu_switch(void** save, void* next);
asm(R"(
.text
.weak df_emu_switch
.type df_emu_switch,@function
df_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size df_emu_switch,.-df_emu_switch
)");
#endif

namespace dflash::cuda::attn_emu {

[[noreturn]] inline void fail(const std::string& what) {
    throw std::runtime_error("attention emulator: " + what);
}

enum class CopyMode { at_wait, at_issue };

struct Block;

struct Copy {
    unsigned char* dst;
    const unsigned char* src;
    int bytes;      // copied
    int src_bytes;  // read from src; the rest is zero-filled
};

// One collective's per-lane inputs and outputs.
struct LaneIo {
    int op = 0;
    uint32_t u[8] = {};
    float f[8] = {};
};

struct Warp {
    int live = 0;
    int arrived = 0;
    unsigned gen = 0;
    LaneIo io[32];
};

struct Thread {
    Block* block = nullptr;
    dim3 thread_idx;
    int index = 0;
    bool done = false;
#if defined(__x86_64__)
    void* sp = nullptr;  // saved stack pointer while switched out
#else
    ucontext_t ctx{};
#endif
    void* stack = nullptr;
    std::vector<Copy> open;
    std::deque<std::vector<Copy>> groups;
};

struct Buffer {
    const unsigned char* begin;
    const unsigned char* end;
};

struct Block {
    dim3 idx, dim, grid;
    std::vector<unsigned char> smem;  // + guard bytes
    size_t smem_bytes = 0;
    std::vector<std::unique_ptr<Thread>> threads;
    std::vector<Warp> warps;
    int live = 0;
    int bar_arrived = 0;
    unsigned bar_gen = 0;
    uint64_t progress = 0;
#if defined(__x86_64__)
    void* sched_sp = nullptr;
#else
    ucontext_t sched{};
#endif
    const std::function<void()>* body = nullptr;
    CopyMode mode = CopyMode::at_wait;
    const std::vector<Buffer>* buffers = nullptr;
    std::string error;  // the first failure inside a fiber
};

constexpr size_t kStackBytes = size_t{1} << 18;  // aligned: the lowest word points at the Thread
constexpr size_t kGuard = 64;

inline Thread& self() {
    auto sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    // Hide where the address came from: derived from a local, the optimiser would take the
    // Thread pointer read through it for a pointer into this frame and drop stores through it.
    asm("" : "+r"(sp));
    return **reinterpret_cast<Thread**>(sp & ~(uintptr_t{kStackBytes} - 1));
}

inline void yield() {
    Thread& t = self();
#if defined(__x86_64__)
    df_emu_switch(&t.sp, t.block->sched_sp);
#else
    swapcontext(&t.ctx, &t.block->sched);
#endif
}

// Fails inside a fiber: records the message, marks the block failed and parks the fiber.
[[noreturn]] inline void fiber_fail(const std::string& what) {
    Thread& t = self();
    if (t.block->error.empty()) t.block->error = what;
    for (;;) yield();
}

inline unsigned char* shared_mem() {
    return self().block->smem.data() + kGuard;
}
inline uint32_t smem_offset(const void* p) {
    const auto* c = static_cast<const unsigned char*>(p);
    const ptrdiff_t off = c - shared_mem();
    if (off < 0 || static_cast<size_t>(off) > self().block->smem_bytes) {
        fiber_fail("a shared-memory address outside the block's dynamic shared memory");
    }
    return static_cast<uint32_t>(off);
}
inline unsigned char* smem_at(uint32_t off, int bytes) {
    Block& b = *self().block;
    if (static_cast<size_t>(off) + bytes > b.smem_bytes) {
        fiber_fail("shared-memory access at byte " + std::to_string(off) + " (+" +
                   std::to_string(bytes) + ") past its " + std::to_string(b.smem_bytes) + " bytes");
    }
    return b.smem.data() + kGuard + off;
}

// ---- barriers and collectives ----------------------------------------------------------------
inline void syncthreads() {
    Thread& t = self();
    Block& b = *t.block;
    const unsigned gen = b.bar_gen;
    if (++b.bar_arrived == b.live) {
        b.bar_arrived = 0;
        ++b.bar_gen;
        ++b.progress;
        return;
    }
    while (b.bar_gen == gen) yield();
}

// Lane inputs are in w.io[lane]; the last lane to arrive runs compute(w) for all of them.
template <class Compute>
void collective(int op, Compute&& compute) {
    Thread& t = self();
    Warp& w = t.block->warps[t.index / 32];
    w.io[t.index % 32].op = op;
    const unsigned gen = w.gen;
    if (++w.arrived == w.live) {
        for (int l = 0; l < w.live; ++l) {
            if (w.io[l].op != op) fiber_fail("lanes of one warp reached different collectives");
        }
        compute(w);
        w.arrived = 0;
        ++w.gen;
        ++t.block->progress;
        return;
    }
    while (w.gen == gen) yield();
}

inline void syncwarp() {
    collective(1, [](Warp&) {});
}

inline float shfl_xor(float v, int mask) {
    Thread& t = self();
    Warp& w = t.block->warps[t.index / 32];
    const int lane = t.index % 32;
    w.io[lane].f[0] = v;
    collective(2, [mask](Warp& wp) {
        float in[32];
        for (int l = 0; l < 32; ++l) in[l] = wp.io[l].f[0];
        for (int l = 0; l < 32; ++l) wp.io[l].f[1] = in[l ^ mask];
    });
    return w.io[lane].f[1];
}

// __match_any_sync over ints (the MoE sort): each lane gets the mask of the lanes holding its
// value.
inline unsigned match_any(int v) {
    Thread& t = self();
    Warp& w = t.block->warps[t.index / 32];
    const int lane = t.index % 32;
    w.io[lane].u[0] = static_cast<uint32_t>(v);
    collective(6, [](Warp& wp) {
        for (int l = 0; l < 32; ++l) {
            uint32_t mask = 0;
            for (int m = 0; m < 32; ++m) {
                if (wp.io[m].u[0] == wp.io[l].u[0]) mask |= 1u << m;
            }
            wp.io[l].u[1] = mask;
        }
    });
    return w.io[lane].u[1];
}

// __any_sync: nonzero on every lane when any lane's predicate is (the wide attention forward's
// warp-uniform branches).
inline int any(bool p) {
    Thread& t = self();
    Warp& w = t.block->warps[t.index / 32];
    const int lane = t.index % 32;
    w.io[lane].u[0] = p ? 1u : 0u;
    collective(7, [](Warp& wp) {
        uint32_t x = 0;
        for (int l = 0; l < 32; ++l) x |= wp.io[l].u[0];
        for (int l = 0; l < 32; ++l) wp.io[l].u[1] = x;
    });
    return static_cast<int>(w.io[lane].u[1]);
}

inline uint16_t smem_u16(uint32_t addr) {
    uint16_t v;
    std::memcpy(&v, smem_at(addr, 2), 2);
    return v;
}

// ldmatrix .m8n8.x4(.trans).b16: lane 8m + q gives the address of row q of matrix m; lane l
// receives, for each matrix m, elements (l / 4, 2(l % 4) + {0, 1}) of it, or of its transpose.
inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr, bool trans) {
    Thread& t = self();
    Warp& w = t.block->warps[t.index / 32];
    const int lane = t.index % 32;
    if (addr % 16 != 0) fiber_fail("ldmatrix row address not 16-byte aligned");
    w.io[lane].u[0] = addr;
    collective(trans ? 4 : 3, [trans](Warp& wp) {
        uint32_t row_addr[32];
        for (int l = 0; l < 32; ++l) row_addr[l] = wp.io[l].u[0];
        for (int l = 0; l < 32; ++l) {
            for (int m = 0; m < 4; ++m) {
                uint16_t e0, e1;
                if (!trans) {
                    const uint32_t row = row_addr[8 * m + l / 4];
                    e0 = smem_u16(row + 2 * (2 * (l % 4)));
                    e1 = smem_u16(row + 2 * (2 * (l % 4) + 1));
                } else {
                    e0 = smem_u16(row_addr[8 * m + 2 * (l % 4)] + 2 * (l / 4));
                    e1 = smem_u16(row_addr[8 * m + 2 * (l % 4) + 1] + 2 * (l / 4));
                }
                wp.io[l].u[1 + m] = static_cast<uint32_t>(e0) | (static_cast<uint32_t>(e1) << 16);
            }
        }
    });
    for (int m = 0; m < 4; ++m) r[m] = w.io[lane].u[1 + m];
}

inline float lo_bf16(uint32_t x) {
    return bf16_to_f32(static_cast<uint16_t>(x & 0xffffu));
}
inline float hi_bf16(uint32_t x) {
    return bf16_to_f32(static_cast<uint16_t>(x >> 16));
}

// mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32 with the PTX ISA fragment layouts (g = lane / 4,
// t = lane % 4): a0 = A[g][2t, 2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..];
// b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]; c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][..].
inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    Thread& t = self();
    Warp& w = t.block->warps[t.index / 32];
    const int lane = t.index % 32;
    LaneIo& io = w.io[lane];
    for (int i = 0; i < 4; ++i) io.u[i] = a[i];
    io.u[4] = b0;
    io.u[5] = b1;
    for (int i = 0; i < 4; ++i) io.f[i] = c[i];
    collective(5, [](Warp& wp) {
        float A[16][16], B[16][8], C[16][8];
        for (int l = 0; l < 32; ++l) {
            const int g = l / 4, tt = l % 4;
            const LaneIo& x = wp.io[l];
            const int rows[4] = {g, g + 8, g, g + 8},
                      cols[4] = {2 * tt, 2 * tt, 2 * tt + 8, 2 * tt + 8};
            for (int i = 0; i < 4; ++i) {
                A[rows[i]][cols[i]] = lo_bf16(x.u[i]);
                A[rows[i]][cols[i] + 1] = hi_bf16(x.u[i]);
            }
            B[2 * tt][g] = lo_bf16(x.u[4]);
            B[2 * tt + 1][g] = hi_bf16(x.u[4]);
            B[2 * tt + 8][g] = lo_bf16(x.u[5]);
            B[2 * tt + 9][g] = hi_bf16(x.u[5]);
            C[g][2 * tt] = x.f[0];
            C[g][2 * tt + 1] = x.f[1];
            C[g + 8][2 * tt] = x.f[2];
            C[g + 8][2 * tt + 1] = x.f[3];
        }
        for (int l = 0; l < 32; ++l) {
            const int g = l / 4, tt = l % 4;
            const int rr[4] = {g, g, g + 8, g + 8},
                      cc[4] = {2 * tt, 2 * tt + 1, 2 * tt, 2 * tt + 1};
            for (int i = 0; i < 4; ++i) {
                float acc = C[rr[i]][cc[i]];
                for (int k = 0; k < 16; ++k) acc += A[rr[i]][k] * B[k][cc[i]];
                wp.io[l].f[4 + i] = acc;
            }
        }
    });
    for (int i = 0; i < 4; ++i) c[i] = io.f[4 + i];
}

// ---- cp.async ----------------------------------------------------------------------------------
inline bool in_buffers(const Block& b, const unsigned char* p, int n) {
    for (const Buffer& buf : *b.buffers) {
        if (p >= buf.begin && p + n <= buf.end) return true;
    }
    return false;
}

inline void perform(const Copy& c) {
    if (c.src_bytes > 0) std::memcpy(c.dst, c.src, static_cast<size_t>(c.src_bytes));
    std::memset(c.dst + c.src_bytes, 0, static_cast<size_t>(c.bytes - c.src_bytes));
}

inline void cp_async(uint32_t dst, const void* src, int bytes, int src_bytes) {
    Thread& t = self();
    const auto* s = static_cast<const unsigned char*>(src);
    if (dst % bytes != 0 || reinterpret_cast<uintptr_t>(s) % bytes != 0) {
        fiber_fail("cp.async with misaligned addresses");
    }
    if (src_bytes > 0 && !in_buffers(*t.block, s, src_bytes)) {
        fiber_fail("cp.async reads global memory outside every tensor of the launch");
    }
    const Copy c{smem_at(dst, bytes), s, bytes, src_bytes};
    if (t.block->mode == CopyMode::at_issue) {
        perform(c);
    } else {
        t.open.push_back(c);
    }
}
inline void cp_async_commit() {
    Thread& t = self();
    t.groups.push_back(std::move(t.open));
    t.open.clear();
}
inline void cp_async_wait(int n) {
    Thread& t = self();
    while (static_cast<int>(t.groups.size()) > n) {
        for (const Copy& c : t.groups.front()) perform(c);
        t.groups.pop_front();
    }
}

// ---- launches ----------------------------------------------------------------------------------
// What every launch of one test shares: the tensors cp.async may read and the copy mode. The
// test passes its address as the launchers' stream.
struct Device {
    std::vector<Buffer> buffers;
    CopyMode mode = CopyMode::at_wait;
    uint64_t blocks_run = 0;
};

inline void fiber_entry() {
    Thread& t = self();
    try {
        (*t.block->body)();
    } catch (const std::exception& e) {
        if (t.block->error.empty()) t.block->error = e.what();
    }
    t.done = true;
    Block& b = *t.block;
    --b.live;
    --b.warps[t.index / 32].live;
    if (b.warps[t.index / 32].arrived > 0) {
        if (b.error.empty()) b.error = "a thread exited while its warp waited in a collective";
    }
    // Exited threads count as arrived at barriers.
    if (b.bar_arrived > 0 && b.bar_arrived == b.live) {
        b.bar_arrived = 0;
        ++b.bar_gen;
    }
    ++b.progress;
#if defined(__x86_64__)
    void* dead = nullptr;
    df_emu_switch(&dead, b.sched_sp);  // never resumed
#endif
}

// Prepares a fresh fiber to start in fiber_entry on its own stack.
inline void start_fiber(Thread& t, Block& b) {
#if defined(__x86_64__)
    auto top = (reinterpret_cast<uintptr_t>(t.stack) + kStackBytes) & ~uintptr_t{15};
    auto* slot = reinterpret_cast<uint64_t*>(top);
    slot[-1] = 0;  // fiber_entry's return address: it never returns
    slot[-2] = reinterpret_cast<uint64_t>(&fiber_entry);  // where df_emu_switch's ret goes
    for (int r = 3; r <= 8; ++r) slot[-r] = 0;            // rbp, rbx, r12-r15
    slot[-9] = 0x1f80u | (uint64_t{0x037f} << 32);        // mxcsr, x87 control word
    t.sp = &slot[-9];
    (void)b;
#else
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = static_cast<char*>(t.stack) + 64;
    t.ctx.uc_stack.ss_size = kStackBytes - 64;
    t.ctx.uc_link = &b.sched;
    makecontext(&t.ctx, fiber_entry, 0);
#endif
}

inline void resume(Block& b, Thread& t) {
#if defined(__x86_64__)
    df_emu_switch(&b.sched_sp, t.sp);
#else
    swapcontext(&b.sched, &t.ctx);
#endif
}

// Fiber stacks of one launch, reused by its blocks.
struct Stacks {
    std::vector<void*> mem;
    explicit Stacks(int n) {
        for (int i = 0; i < n; ++i) {
            mem.push_back(std::aligned_alloc(kStackBytes, kStackBytes));
            if (mem.back() == nullptr) fail("out of memory for fiber stacks");
        }
    }
    ~Stacks() {
        for (void* p : mem) std::free(p);
    }
    Stacks(const Stacks&) = delete;
    Stacks& operator=(const Stacks&) = delete;
};

inline void run_block(Block& b, const Stacks& stacks) {
    const int n = static_cast<int>(b.dim.x * b.dim.y * b.dim.z);
    b.smem.assign(b.smem_bytes + 2 * kGuard, 0xff);  // bf16 0xffff is a NaN
    b.warps.assign(static_cast<size_t>((n + 31) / 32), Warp{});
    b.live = n;
    for (int i = 0; i < n; ++i) {
        auto t = std::make_unique<Thread>();
        t->block = &b;
        t->index = i;
        t->thread_idx = dim3(static_cast<unsigned>(i), 0, 0);
        t->stack = stacks.mem[static_cast<size_t>(i)];
        *reinterpret_cast<Thread**>(t->stack) = t.get();
        start_fiber(*t, b);
        b.warps[i / 32].live++;
        b.threads.push_back(std::move(t));
    }
    int remaining = n;
    while (remaining > 0 && b.error.empty()) {
        const uint64_t before = b.progress;
        for (auto& t : b.threads) {
            if (t->done) continue;
            resume(b, *t);
            if (t->done) --remaining;
            if (!b.error.empty()) break;
        }
        if (remaining > 0 && b.progress == before && b.error.empty()) {
            b.error = "deadlock: every live thread waits and no barrier or collective completes";
        }
    }
    for (size_t i = 0; i < kGuard; ++i) {
        if (b.smem[i] != 0xff || b.smem[kGuard + b.smem_bytes + i] != 0xff) {
            if (b.error.empty()) b.error = "a write outside the block's dynamic shared memory";
        }
    }
    if (!b.error.empty()) {
        fail("block (" + std::to_string(b.idx.x) + ", " + std::to_string(b.idx.y) + ", " +
             std::to_string(b.idx.z) + "): " + b.error);
    }
}

inline CUstream_st* as_stream(Device& dev) {
    return reinterpret_cast<CUstream_st*>(&dev);
}

template <class Body>
void launch(CUstream_st* stream, dim3 grid, dim3 block, size_t smem_bytes, Body&& body) {
    Device* dev = reinterpret_cast<Device*>(stream);
    if (dev == nullptr) fail("launch without a Device (pass as_stream(device) as the stream)");
    const std::function<void()> fn = body;
    const Stacks stacks(static_cast<int>(block.x * block.y * block.z));
    for (unsigned z = 0; z < grid.z; ++z) {
        for (unsigned y = 0; y < grid.y; ++y) {
            for (unsigned x = 0; x < grid.x; ++x) {
                Block b;
                b.idx = dim3(x, y, z);
                b.dim = block;
                b.grid = grid;
                b.smem_bytes = smem_bytes;
                b.body = &fn;
                b.mode = dev->mode;
                b.buffers = &dev->buffers;
                run_block(b, stacks);
                ++dev->blocks_run;
            }
        }
    }
}

}  // namespace dflash::cuda::attn_emu
