// DF_CUDA_CHECK(stmt): wraps every CUDA runtime call and kernel launch; DF_CUBLAS_CHECK(stmt) every
// cuBLASLt call (docs/design.md, "Errors"). A failure throws dflash::DeviceError naming the error,
// the statement, file:line and the current device. Included only by code in src/backend/cuda (it
// needs the CUDA headers). Tested by tests/cuda/cuda_device_test.cpp.
//
// Note [No fmt in .cu files]: nvcc 13 rejects fmt 9's compile-time format strings (consteval), so
// .cu files include neither fmt nor core/error.h. They hold kernels and thin launchers that
// check with DF_CUDA_CHECK; argument checks (DF_CHECK) live in a sibling .cpp built by the C++
// compiler.
#pragma once

#include <cuda_runtime_api.h>

namespace dflash::cuda::detail {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* stmt, const char* file, int line);
// A failed call into a CUDA library: `library` ("cuBLASLt", "NCCL"), its name for the status and
// its description of it.
[[noreturn]] void throw_library_error(const char* library, const char* status,
                                      const char* description, const char* stmt, const char* file,
                                      int line);
}  // namespace dflash::cuda::detail

#define DF_CUDA_CHECK(stmt)                                                                    \
    do {                                                                                       \
        const cudaError_t df_cuda_err_ = (stmt);                                               \
        if (df_cuda_err_ != cudaSuccess)                                                       \
            ::dflash::cuda::detail::throw_cuda_error(df_cuda_err_, #stmt, __FILE__, __LINE__); \
    } while (0)

// After every kernel launch, naming the kernel: catches bad launch configurations at the launch
// site (errors during the kernel's execution surface at the next synchronising call).
#define DF_CUDA_CHECK_LAUNCH(kernel)                                                               \
    do {                                                                                           \
        const cudaError_t df_cuda_err_ = cudaGetLastError();                                       \
        if (df_cuda_err_ != cudaSuccess)                                                           \
            ::dflash::cuda::detail::throw_cuda_error(df_cuda_err_, "launch of " #kernel, __FILE__, \
                                                     __LINE__);                                    \
    } while (0)

// Around every cuBLASLt call (the unit includes <cublasLt.h>).
#define DF_CUBLAS_CHECK(stmt)                                                       \
    do {                                                                            \
        const cublasStatus_t df_cublas_st_ = (stmt);                                \
        if (df_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                 \
            ::dflash::cuda::detail::throw_library_error(                            \
                "cuBLASLt", cublasLtGetStatusName(df_cublas_st_),                   \
                cublasLtGetStatusString(df_cublas_st_), #stmt, __FILE__, __LINE__); \
    } while (0)
