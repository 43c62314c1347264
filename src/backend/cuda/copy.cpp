// CUDA copy family (backend/op_list.h: copy, copy_columns, fill): checks here, kernels in
// kernels/copy.cu. Also the dtype checks every element-wise family shares (op_checks.h). Tested by
// tests/cuda/copy_cuda_test.cpp and tests/cuda/cuda_backend_test.cpp.
#include <bit>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels/copy.h"
#include "backend/cuda/op_checks.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {

// dst and src must not overlap unless they are the same tensor (a same-dtype copy is
// cudaMemcpyAsync; a conversion reads and writes different element widths).
void copy(const Exec& ex, const Tensor& dst, const Tensor& src) {
    check_device(ex, dst, "copy", "dst");
    check_device(ex, src, "copy", "src");
    check_copy_shapes(dst, src);
    const int64_t n = src.numel();
    if (n == 0) return;
    if (dst.dtype() == src.dtype()) {
        kernels::copy_bytes(dst.data(), src.data(), src.nbytes(), ex.stream);
    } else if (dst.dtype() == DType::bf16 && src.dtype() == DType::f32) {
        kernels::f32_to_bf16(static_cast<uint16_t*>(dst.data()),
                             static_cast<const float*>(src.data()), n, ex.stream);
    } else if (dst.dtype() == DType::f32 && src.dtype() == DType::bf16) {
        kernels::bf16_to_f32(static_cast<float*>(dst.data()),
                             static_cast<const uint16_t*>(src.data()), n, ex.stream);
    } else {
        DF_FAIL("copy: cannot convert {} to {} (only f32 <-> bf16 convert)", src.describe(),
                dst.describe());
    }
}

void copy_columns(const Exec& ex, const Tensor& dst, int64_t col, const Tensor& src) {
    check_device(ex, dst, "copy_columns", "dst");
    check_device(ex, src, "copy_columns", "src");
    check_copy_columns_shapes(dst, col, src);
    if (src.numel() == 0) return;
    const size_t es = dtype_size(src.dtype());
    auto* d = static_cast<char*>(dst.data()) + static_cast<size_t>(col) * es;
    kernels::copy_2d(d, static_cast<size_t>(dst.dim(1)) * es, src.data(),
                     static_cast<size_t>(src.dim(1)) * es, static_cast<size_t>(src.dim(1)) * es,
                     static_cast<size_t>(src.dim(0)), ex.stream);
}

void fill(const Exec& ex, const Tensor& t, float value) {
    check_device(ex, t, "fill", "t");
    const int64_t n = t.numel();
    if (t.empty()) return;
    switch (t.dtype()) {
        case DType::f32:
            kernels::fill_u32(t.data(), n, std::bit_cast<uint32_t>(value), ex.stream);
            break;
        case DType::bf16:
            kernels::fill_u16(t.data(), n, f32_to_bf16(value), ex.stream);
            break;
        case DType::i32:
            kernels::fill_u32(t.data(), n, std::bit_cast<uint32_t>(static_cast<int32_t>(value)),
                              ex.stream);
            break;
        case DType::u8:
            // Raw bytes (MXFP4 blocks) are loaded, never filled with a number.
            DF_FAIL("fill: {} holds raw bytes, not numbers", t.describe());
    }
}

void write_rows(const Exec& ex, const Tensor& dst, const Tensor& row0, const Tensor& src) {
    check_device(ex, dst, "write_rows", "dst");
    check_device(ex, src, "write_rows", "src");
    check_device(ex, row0, "write_rows", "row0");
    const size_t row_bytes = check_write_rows_args(dst, row0, src);
    if (src.numel() == 0) return;
    kernels::write_rows(dst.data(), dst.dim(0), static_cast<const int32_t*>(row0.data()),
                        src.data(), src.dim(0), row_bytes, ex.stream);
}

}  // namespace dflash::cuda
