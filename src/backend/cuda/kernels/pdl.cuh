// Programmatic dependent launch (PDL) for the decode block's kernels: the launch that lets a
// kernel start while the kernel before it on the stream is still running, and the two device-side
// calls that make that safe. Included only by .cu files (and, through them, by the CPU emulator's
// tests, where every call here is a no-op or a plain launch).
//
// Note [Programmatic dependent launch]: a decode step is a chain of 9-12 small kernels a layer
// (docs/engine.md "The decode block on CUDA"), each of which reads what the one before it wrote. A
// normal launch starts a kernel only after its predecessor has finished and its writes are
// flushed, so every link of the chain pays the launch (the grid's start, its blocks' scheduling
// and prologue) in series. Launched with the PDL attribute (`pdl` true), a kernel may start as
// soon as every block of its predecessor has called launch_dependents() (or exited), and then:
//   - before wait(), it may touch only memory that no kernel of the step writes. Only
//     rows_linear does: it copies its first stages' weight rows into shared memory there, so
//     the fill of its pipeline overlaps the kernel before it (a weight is never written by a
//     kernel of a decode or verify step; docs/performance.md "Twelfth session"). Asking L2 for
//     the weights instead (cp.async.bulk.prefetch.L2) was tried in the ninth session and did not
//     pay ("Programmatic dependent launch for the decode block");
//   - wait() returns once the predecessor has finished and its writes are visible, so everything
//     after it (every read of an activation, the cache, kv_len, positions; every write) is ordered
//     as with a normal launch;
//   - launch_dependents(), called right after wait(), lets the next kernel start. A kernel that
//     calls it before its own wait() would let its successor run two links ahead.
// Every kernel launched with the attribute calls wait() first, so results do not change; a kernel
// launched without it (cuBLAS, copies) orders as always. Setting: cuda_graphs.programmatic_launch
// (docs/settings.md).
#pragma once

#ifndef DF_ATTN_EMULATE
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#endif

namespace dflash::cuda::pdl {

// Waits until the kernel before this one has finished and its writes are visible (no-op when
// this kernel was launched without the PDL attribute).
__device__ __forceinline__ void wait() {
#ifndef DF_ATTN_EMULATE
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel on the stream start (if it was launched with the PDL attribute).
__device__ __forceinline__ void launch_dependents() {
#ifndef DF_ATTN_EMULATE
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace dflash::cuda::pdl

#ifdef DF_ATTN_EMULATE
#define DF_PDL_LAUNCH(pdl_on, kernel, grid, block, smem, stream, ...)                              \
    do {                                                                                           \
        (void)(pdl_on);                                                                            \
        ::dflash::cuda::attn_emu::launch(stream, grid, block, smem, [&] { kernel(__VA_ARGS__); }); \
    } while (0)
#else
// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when pdl_on; dynamic
// shared memory above 48 KB must be allowed per kernel first. Every kernel of the attention
// family launches through it (DF_ATTN_LAUNCH in attention_mma.cuh is it with pdl_on false).
#define DF_PDL_LAUNCH(pdl_on, kernel, grid, block, smem, stream, ...)                          \
    do {                                                                                       \
        if ((smem) > 48 * 1024) {                                                              \
            DF_CUDA_CHECK(cudaFuncSetAttribute(                                                \
                kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem))); \
        }                                                                                      \
        cudaLaunchConfig_t df_cfg{};                                                           \
        df_cfg.gridDim = dim3(grid);                                                           \
        df_cfg.blockDim = dim3(block);                                                         \
        df_cfg.dynamicSmemBytes = static_cast<size_t>(smem);                                   \
        df_cfg.stream = stream;                                                                \
        cudaLaunchAttribute df_attr[1];                                                        \
        df_attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;                    \
        df_attr[0].val.programmaticStreamSerializationAllowed = 1;                             \
        df_cfg.attrs = df_attr;                                                                \
        df_cfg.numAttrs = (pdl_on) ? 1 : 0;                                                    \
        DF_CUDA_CHECK(cudaLaunchKernelEx(&df_cfg, kernel, __VA_ARGS__));                       \
    } while (0)
#endif
