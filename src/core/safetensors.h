// Reading and writing safetensors files: an 8-byte little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}), then the raw
// little-endian tensor data. Files are memory-mapped for reading and validated completely at open,
// so a malformed or truncated file fails with one clear error naming the file and the problem
// instead of a crash later. Writing goes to `<path>.tmp` and is renamed into place, so the final
// name never holds a half-written file. Tested by tests/core/safetensors_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace dflash {

// One tensor as the header describes it. `begin`/`end` are byte offsets into the data section
// (which starts right after the header), as in the file.
struct SafetensorsEntry {
    std::string dtype;           // safetensors spelling: "F32", "BF16", "F16", "I32", ...
    std::vector<int64_t> shape;  // [] for a scalar
    uint64_t begin = 0;
    uint64_t end = 0;
    uint64_t nbytes() const { return end - begin; }
};

// Bytes per element of a safetensors dtype string, or 0 when the dtype is not one the format
// defines.
size_t safetensors_dtype_size(const std::string& dtype);

class SafetensorsFile {
  public:
    // Maps and validates the whole file (header, every entry, offsets against the file size).
    static SafetensorsFile open(const std::filesystem::path& path);

    SafetensorsFile(SafetensorsFile&& o) noexcept;
    SafetensorsFile& operator=(SafetensorsFile&& o) noexcept;
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;
    ~SafetensorsFile();

    const std::filesystem::path& path() const { return path_; }
    // Tensor names in the order their data appears in the file.
    const std::vector<std::string>& names() const { return names_; }
    bool has(const std::string& name) const { return entries_.count(name) != 0; }
    const SafetensorsEntry& entry(const std::string& name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

    // The tensor converted to f32 (from F32, BF16 or F16). A NaN or infinite value is an error
    // naming the tensor, the file and where the first one is: weights must be finite to be used.
    HostTensor read_f32(const std::string& name) const;
    // The NaN and infinite values of a float tensor (F32, BF16, F16), without keeping a copy:
    // what `dflash inspect` reports. count == 0 when all are finite.
    struct NonFinite {
        int64_t count = 0;
        int64_t first_index = -1;  // flat index of the first one
        float first_value = 0;
    };
    NonFinite nonfinite(const std::string& name) const;
    // I32 stays i32; F32/BF16/F16 become f32.
    HostTensor read(const std::string& name) const;
    // The stored bytes of one tensor (not necessarily aligned).
    const unsigned char* raw_data(const std::string& name) const;

  private:
    SafetensorsFile() = default;
    void unmap();

    std::filesystem::path path_;
    void* map_ = nullptr;  // the whole file, read-only
    size_t map_size_ = 0;
    size_t data_start_ = 0;  // 8 + header length
    std::vector<std::string> names_;
    std::map<std::string, SafetensorsEntry> entries_;
    std::map<std::string, std::string> metadata_;
};

// "3 of 4096 values are NaN or infinite (the first, nan, at flat index 17)" for errors and reports.
std::string describe_nonfinite(const SafetensorsFile::NonFinite& nf, int64_t numel);

// Writes `tensors` (CPU views) to `path`. Float tensors (f32 or bf16) are stored as `store_as`
// (DType::f32 -> "F32", DType::bf16 -> "BF16", rounding to nearest even); i32 tensors as "I32".
// Data is laid out in the given order; the header is space-padded to a multiple of 8 bytes.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata, DType store_as);

// Bytes a tensor takes on disk when written by write_safetensors with `store_as`.
uint64_t stored_nbytes(const Tensor& t, DType store_as);

}  // namespace dflash
