// Copies and fills on the CPU "device" (host memory): copy with f32 <-> bf16 conversion, a column
// block copy (the target's captured features), and fill. Tested by tests/ops/copy_test.cpp.
#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

void check_cpu(const Tensor& t, const char* op, const char* name) {
    DF_CHECK(t.empty() || t.device().kind == DeviceKind::cpu, "{}: {} is {}, expected a CPU tensor",
             op, name, t.describe());
}

}  // namespace

void copy(const Exec& ex, const Tensor& dst, const Tensor& src) {
    check_cpu(dst, "copy", "dst");
    check_cpu(src, "copy", "src");
    check_copy_shapes(dst, src);
    const int64_t n = src.numel();
    if (n == 0) return;
    if (dst.dtype() == src.dtype()) {
        std::memmove(dst.data(), src.data(), src.nbytes());
    } else if (dst.dtype() == DType::bf16 && src.dtype() == DType::f32) {
        const float* s = src.f32();
        uint16_t* d = dst.bf16();
        parallel_for(ex, n, n > 65536, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
                d[i] = f32_to_bf16(s[i]);
            }
        });
    } else if (dst.dtype() == DType::f32 && src.dtype() == DType::bf16) {
        const uint16_t* s = src.bf16();
        float* d = dst.f32();
        parallel_for(ex, n, n > 65536, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
                d[i] = bf16_to_f32(s[i]);
            }
        });
    } else {
        DF_FAIL("copy: cannot convert {} to {}", src.describe(), dst.describe());
    }
}

void copy_columns(const Exec&, const Tensor& dst, int64_t col, const Tensor& src) {
    check_cpu(dst, "copy_columns", "dst");
    check_cpu(src, "copy_columns", "src");
    check_copy_columns_shapes(dst, col, src);
    const size_t es = dtype_size(src.dtype());
    const size_t row_bytes = static_cast<size_t>(src.dim(1)) * es;
    const auto* s = static_cast<const char*>(src.data());
    auto* d = static_cast<char*>(dst.data());
    for (int64_t r = 0; r < src.dim(0); ++r)
        std::memcpy(d + (r * dst.dim(1) + col) * es, s + r * row_bytes, row_bytes);
}

void fill(const Exec& ex, const Tensor& t, float value) {
    check_cpu(t, "fill", "t");
    const int64_t n = t.numel();
    // Zeroing a model's gradients is the large case; below that a wake-up costs more than it saves.
    const bool parallel = n > 65536;
    switch (t.dtype()) {
        case DType::f32:
            parallel_for(ex, n, parallel, [&](int64_t i0, int64_t i1) {
                std::fill(t.f32() + i0, t.f32() + i1, value);
            });
            break;
        case DType::bf16: {
            const uint16_t b = f32_to_bf16(value);
            parallel_for(ex, n, parallel, [&](int64_t i0, int64_t i1) {
                std::fill(t.bf16() + i0, t.bf16() + i1, b);
            });
            break;
        }
        case DType::i32:
            parallel_for(ex, n, parallel, [&](int64_t i0, int64_t i1) {
                std::fill(t.i32() + i0, t.i32() + i1, static_cast<int32_t>(value));
            });
            break;
        case DType::u8:
            // Raw bytes (MXFP4 blocks) are loaded, never filled with a number.
            DF_FAIL("fill: {} holds raw bytes, not numbers", t.describe());
    }
}

void write_rows(const Exec&, const Tensor& dst, const Tensor& row0, const Tensor& src) {
    check_cpu(dst, "write_rows", "dst");
    check_cpu(src, "write_rows", "src");
    check_cpu(row0, "write_rows", "row0");
    const size_t row_bytes = check_write_rows_args(dst, row0, src);
    const int64_t r0 = row0.i32()[0];
    const int64_t n = std::min(src.dim(0), std::max<int64_t>(0, dst.dim(0) - r0));
    if (r0 < 0 || n <= 0) return;
    std::memcpy(static_cast<char*>(dst.data()) + static_cast<size_t>(r0) * row_bytes, src.data(),
                static_cast<size_t>(n) * row_bytes);
}

}  // namespace dflash::cpu
