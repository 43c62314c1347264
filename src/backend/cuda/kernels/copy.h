// Raw launchers of the copy family (see copy.cpp for the Tensor-level ops and their checks):
// device-to-device copies with f32 <-> bf16 conversion, 2-D copies and fills, queued on `stream`.
// No fmt (Note [No fmt in .cu files]). Tested by tests/cuda/copy_cuda_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

void copy_bytes(void* dst, const void* src, size_t bytes, CUstream_st* stream);
// Rounds to nearest even, NaN stays NaN: the bits of dflash::f32_to_bf16.
void f32_to_bf16(uint16_t* dst, const float* src, int64_t n, CUstream_st* stream);
void bf16_to_f32(float* dst, const uint16_t* src, int64_t n, CUstream_st* stream);
// `rows` rows of `width` bytes from src (rows `src_pitch` bytes apart) to dst (`dst_pitch` apart).
void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
             size_t rows, CUstream_st* stream);
// Every one of n 32-bit (16-bit) elements at dst = pattern.
// rows*row_bytes bytes from src to dst + row0[0]*row_bytes, row0 read on the device; rows that
// would reach past dst_rows are not written.
void write_rows(void* dst, int64_t dst_rows, const int32_t* row0, const void* src, int64_t rows,
                size_t row_bytes, CUstream_st* stream);
void fill_u32(void* dst, int64_t n, uint32_t pattern, CUstream_st* stream);
void fill_u16(void* dst, int64_t n, uint16_t pattern, CUstream_st* stream);

}  // namespace dflash::cuda::kernels
