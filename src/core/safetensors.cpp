// safetensors reader (mmap + full validation at open) and writer (through AtomicFileWriter).
// Tested by tests/core/safetensors_test.cpp.
#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"
#include "core/input_file.h"

namespace dflash {

namespace {

// Largest header accepted: the JSON of a checkpoint with a million tensors stays below it; a
// corrupt length field fails with this cap named instead of an allocation of gigabytes.
constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;

}  // namespace

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swapping");

namespace {

using nlohmann::json;

struct DtypeInfo {
    const char* name;
    size_t size;
};

// Every dtype the safetensors format defines, so that files holding tensors we never read (I64
// position ids, U8 masks) still open; reading is limited to the dtypes we compute with.
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8},
};

std::string quoted(const std::filesystem::path& p) {
    return "'" + p.string() + "'";
}

// Parses one `[a, b, ...]` of non-negative integers; `what` names it in errors.
std::vector<uint64_t> parse_uints(const json& j, const std::filesystem::path& path,
                                  const std::string& name, const char* what) {
    DF_CHECK(j.is_array(), "safetensors file {}: tensor '{}' has {} {} (expected an array)",
             quoted(path), name, what, j.dump());
    std::vector<uint64_t> out;
    for (const auto& v : j) {
        DF_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
                 "safetensors file {}: tensor '{}' has {} {} (expected non-negative integers)",
                 quoted(path), name, what, j.dump());
        out.push_back(v.get<uint64_t>());
    }
    return out;
}

SafetensorsEntry parse_entry(const std::string& name, const json& j,
                             const std::filesystem::path& path) {
    DF_CHECK(
        j.is_object() && j.contains("dtype") && j.contains("shape") && j.contains("data_offsets"),
        "safetensors file {}: header entry '{}' is {} (expected an object with dtype, shape "
        "and data_offsets)",
        quoted(path), name, j.dump());
    SafetensorsEntry e;
    DF_CHECK(j["dtype"].is_string(), "safetensors file {}: tensor '{}' has dtype {} (not a string)",
             quoted(path), name, j["dtype"].dump());
    e.dtype = j["dtype"].get<std::string>();
    const size_t esize = safetensors_dtype_size(e.dtype);
    DF_CHECK(esize != 0,
             "safetensors file {}: tensor '{}' has unknown dtype '{}' (safetensors dtypes are "
             "BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64, F8_E4M3, F8_E5M2)",
             quoted(path), name, e.dtype);
    uint64_t numel = 1;
    for (uint64_t d : parse_uints(j["shape"], path, name, "shape")) {
        DF_CHECK(d <= static_cast<uint64_t>(INT64_MAX) && !__builtin_mul_overflow(numel, d, &numel),
                 "safetensors file {}: tensor '{}' shape {} overflows", quoted(path), name,
                 j["shape"].dump());
        e.shape.push_back(static_cast<int64_t>(d));
    }
    const auto offs = parse_uints(j["data_offsets"], path, name, "data_offsets");
    DF_CHECK(offs.size() == 2 && offs[0] <= offs[1],
             "safetensors file {}: tensor '{}' has data_offsets {} (expected [begin, end] with "
             "begin <= end)",
             quoted(path), name, j["data_offsets"].dump());
    e.begin = offs[0];
    e.end = offs[1];
    uint64_t expect = 0;
    DF_CHECK(!__builtin_mul_overflow(numel, esize, &expect) && expect == e.nbytes(),
             "safetensors file {}: tensor '{}' is {} {} ({} bytes) but its data_offsets [{}, {}] "
             "span {} bytes (shape and byte size disagree)",
             quoted(path), name, e.dtype, j["shape"].dump(), expect, e.begin, e.end, e.nbytes());
    return e;
}

// Checks the entries against each other and against the data section; on success returns the
// names in file order.
std::vector<std::string> check_layout(const std::map<std::string, SafetensorsEntry>& entries,
                                      uint64_t data_size, uint64_t data_start,
                                      const std::filesystem::path& path) {
    std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
    for (const auto& [n, e] : entries) order.emplace_back(&n, &e);
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        return std::tie(a.second->begin, a.second->end, *a.first) <
               std::tie(b.second->begin, b.second->end, *b.first);
    });
    uint64_t prev_end = 0, max_end = 0, total = 0;
    const std::string* prev = nullptr;
    for (const auto& [n, e] : order) {
        if (e->nbytes() == 0) continue;
        DF_CHECK(prev == nullptr || e->begin >= prev_end,
                 "safetensors file {}: tensors '{}' and '{}' overlap (data_offsets [.., {}] and "
                 "[{}, {}]); the header is corrupt",
                 quoted(path), *prev, *n, prev_end, e->begin, e->end);
        prev = n;
        prev_end = e->end;
        max_end = std::max(max_end, e->end);
        total += e->nbytes();
    }
    if (max_end > data_size) {
        // Tensors packed back to back from offset 0 whose end lies past the file: the header is
        // fine and the data was cut short (an interrupted download or copy). Named: the first
        // tensor the cut reaches.
        std::string first_cut;
        for (const auto& [n, e] : order)
            if (first_cut.empty() && e->nbytes() > 0 && e->end > data_size) first_cut = *n;
        DF_CHECK(total != max_end,
                 "safetensors file {}: data is truncated: the header describes {} bytes of "
                 "tensor data but the file holds only {} (file size {}, expected {}), so tensor "
                 "'{}' and those after it are cut short; was a download or copy interrupted?",
                 quoted(path), max_end, data_size, data_start + data_size, data_start + max_end,
                 first_cut);
        for (const auto& [n, e] : order) {
            DF_CHECK(e->end <= data_size,
                     "safetensors file {}: tensor '{}' data_offsets [{}, {}] are out of range: "
                     "the data section is only {} bytes",
                     quoted(path), *n, e->begin, e->end, data_size);
        }
    }
    std::vector<std::string> names;
    for (const auto& p : order) names.push_back(*p.first);
    return names;
}

void parse_metadata(const json& j, const std::filesystem::path& path,
                    std::map<std::string, std::string>& out) {
    DF_CHECK(j.is_object(), "safetensors file {}: __metadata__ is {} (expected an object)",
             quoted(path), j.dump());
    for (const auto& [k, v] : j.items()) {
        DF_CHECK(v.is_string(),
                 "safetensors file {}: __metadata__['{}'] is {} (safetensors metadata values must "
                 "be strings)",
                 quoted(path), k, v.dump());
        out[k] = v.get<std::string>();
    }
}

// Copies `n` elements of stored type `src_dtype` at `src` into f32.
void decode_to_f32(const unsigned char* src, const std::string& src_dtype, float* dst, size_t n) {
    if (src_dtype == "F32") {
        std::memcpy(dst, src, n * 4);
    } else if (src_dtype == "BF16") {
        for (size_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, src + 2 * i, 2);
            dst[i] = bf16_to_f32(h);
        }
    } else if (src_dtype == "F16") {
        for (size_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, src + 2 * i, 2);
            dst[i] = f16_to_f32(h);
        }
    } else {
        DF_ASSERT(false, "decode_to_f32 of {}", src_dtype);
    }
}

// Adds the non-finite values of v[0..n) (flat indices offset..offset+n) to `so_far`.
SafetensorsFile::NonFinite scan_nonfinite(const float* v, size_t n, size_t offset,
                                          SafetensorsFile::NonFinite so_far) {
    for (size_t i = 0; i < n; ++i) {
        if (std::isfinite(v[i])) [[likely]]
            continue;
        if (so_far.count == 0) {
            so_far.first_index = static_cast<int64_t>(offset + i);
            so_far.first_value = v[i];
        }
        ++so_far.count;
    }
    return so_far;
}

bool is_float_dtype(const std::string& d) {
    return d == "F32" || d == "BF16" || d == "F16";
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
    for (const auto& d : kDtypes)
        if (dtype == d.name) return d.size;
    return 0;
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
    SafetensorsFile f;
    f.path_ = path;
    // A regular file only: a FIFO or a device named like a checkpoint is refused, not waited on.
    uint64_t file_size = 0;
    const int fd = open_input_file(path, "safetensors file", file_size);
    if (file_size < 8) {
        ::close(fd);
        DF_FAIL(
            "safetensors file {} is {} bytes, shorter than the 8-byte header length; the file "
            "is empty or truncated",
            quoted(path), file_size);
    }
    void* m = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_errno = errno;
    ::close(fd);  // the mapping keeps the file alive
    DF_CHECK(m != MAP_FAILED, "cannot mmap safetensors file {} ({} bytes): {}", quoted(path),
             file_size, std::strerror(map_errno));
    f.map_ = m;
    f.map_size_ = file_size;
    const auto* bytes = static_cast<const unsigned char*>(m);

    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes, 8);
    DF_CHECK(header_len <= file_size - 8,
             "safetensors file {}: header length {} is larger than the file ({} bytes); the file "
             "is truncated or not a safetensors file",
             quoted(path), header_len, file_size);
    DF_CHECK(header_len <= kMaxSafetensorsHeaderBytes,
             "safetensors file {}: the header is {}, more than the {} cap of a header; the file is "
             "corrupt or not a safetensors file",
             quoted(path), byte_size_text(header_len), byte_size_text(kMaxSafetensorsHeaderBytes));
    f.data_start_ = 8 + header_len;

    // nlohmann keeps the last of duplicate keys silently; the callback sees every top-level key.
    std::set<std::string> seen;
    std::string duplicate;
    json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
        if (ev == json::parse_event_t::key && depth == 1) {
            const auto k = parsed.get<std::string>();
            if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
        }
        return true;
    };
    const std::string_view text(reinterpret_cast<const char*>(bytes + 8), header_len);
    json header;
    try {
        header = json::parse(text.begin(), text.end(), cb);
    } catch (const json::parse_error& e) {
        DF_FAIL(
            "safetensors file {}: header is not valid JSON ({}); the file is corrupt or not a "
            "safetensors file",
            quoted(path), e.what());
    }
    DF_CHECK(header.is_object(), "safetensors file {}: header is JSON {} but must be an object",
             quoted(path), header.type_name());
    DF_CHECK(duplicate.empty(), "safetensors file {}: tensor name '{}' appears twice in the header",
             quoted(path), duplicate);

    for (const auto& [name, value] : header.items()) {
        if (name == "__metadata__") {
            parse_metadata(value, path, f.metadata_);
        } else {
            f.entries_.emplace(name, parse_entry(name, value, path));
        }
    }
    f.names_ = check_layout(f.entries_, file_size - f.data_start_, f.data_start_, path);
    return f;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept {
    *this = std::move(o);
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
    if (this != &o) {
        unmap();
        path_ = std::move(o.path_);
        map_ = std::exchange(o.map_, nullptr);
        map_size_ = std::exchange(o.map_size_, 0);
        data_start_ = o.data_start_;
        names_ = std::move(o.names_);
        entries_ = std::move(o.entries_);
        metadata_ = std::move(o.metadata_);
    }
    return *this;
}

SafetensorsFile::~SafetensorsFile() {
    unmap();
}

void SafetensorsFile::unmap() {
    if (map_ != nullptr) ::munmap(map_, map_size_);
    map_ = nullptr;
    map_size_ = 0;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
    auto it = entries_.find(name);
    DF_CHECK(it != entries_.end(), "safetensors file {} has no tensor '{}' ({} tensors in it)",
             quoted(path_), name, entries_.size());
    return it->second;
}

const unsigned char* SafetensorsFile::raw_data(const std::string& name) const {
    const auto& e = entry(name);
    return static_cast<const unsigned char*>(map_) + data_start_ + e.begin;
}

HostTensor SafetensorsFile::read_f32(const std::string& name) const {
    const auto& e = entry(name);
    DF_CHECK(is_float_dtype(e.dtype),
             "tensor '{}' in {} is {}; only F32, BF16 and F16 tensors can be read as f32", name,
             quoted(path_), e.dtype);
    DF_CHECK(e.shape.size() <= static_cast<size_t>(Shape::kMaxRank),
             "tensor '{}' in {} has rank {}; at most {} is supported", name, quoted(path_),
             e.shape.size(), Shape::kMaxRank);
    HostTensor t(Shape(e.shape), DType::f32);
    const auto n = static_cast<size_t>(t.numel());
    decode_to_f32(raw_data(name), e.dtype, t.f32(), n);
    const NonFinite nf = scan_nonfinite(t.f32(), n, 0, {});
    DF_CHECK(nf.count == 0,
             "tensor '{}' in {} is not finite: {}; the file is damaged or was saved from a run "
             "that diverged (use an earlier checkpoint; `dflash inspect` lists every such tensor)",
             name, quoted(path_), describe_nonfinite(nf, t.numel()));
    return t;
}

SafetensorsFile::NonFinite SafetensorsFile::nonfinite(const std::string& name) const {
    const auto& e = entry(name);
    DF_CHECK(is_float_dtype(e.dtype), "tensor '{}' in {} is {}, not a float tensor", name,
             quoted(path_), e.dtype);
    const size_t esize = safetensors_dtype_size(e.dtype);
    const size_t numel = e.nbytes() / esize;
    // In chunks, so that checking a large tensor needs no copy of it.
    constexpr size_t kChunk = size_t{1} << 16;
    std::vector<float> buf(std::min(numel, kChunk));
    NonFinite nf;
    for (size_t i = 0; i < numel; i += kChunk) {
        const size_t m = std::min(kChunk, numel - i);
        // BF16 chunks are checked on their bits first (loading a large target scans every one):
        // a value is NaN or infinite when its exponent bits are all ones. Bytes, not uint16_t: a
        // stored tensor need not be 2-byte aligned. Only a chunk with one is decoded.
        if (e.dtype == "BF16") {
            const unsigned char* b = raw_data(name) + i * esize;
            bool bad = false;
            for (size_t j = 0; j < m; ++j)
                bad |= (b[2 * j + 1] & 0x7F) == 0x7F && (b[2 * j] & 0x80) != 0;
            if (!bad) continue;
        }
        decode_to_f32(raw_data(name) + i * esize, e.dtype, buf.data(), m);
        nf = scan_nonfinite(buf.data(), m, i, nf);
    }
    return nf;
}

std::string describe_nonfinite(const SafetensorsFile::NonFinite& nf, int64_t numel) {
    return fmt::format("{} of {} values are NaN or infinite (the first, {}, at flat index {})",
                       nf.count, numel, nf.first_value, nf.first_index);
}

HostTensor SafetensorsFile::read(const std::string& name) const {
    const auto& e = entry(name);
    if (e.dtype != "I32") return read_f32(name);
    DF_CHECK(e.shape.size() <= static_cast<size_t>(Shape::kMaxRank),
             "tensor '{}' in {} has rank {}; at most {} is supported", name, quoted(path_),
             e.shape.size(), Shape::kMaxRank);
    HostTensor t(Shape(e.shape), DType::i32);
    std::memcpy(t.i32(), raw_data(name), t.nbytes());
    return t;
}

// ---- writing -------------------------------------------------------------------------------

uint64_t stored_nbytes(const Tensor& t, DType store_as) {
    // i32 and u8 keep their own width; only float tensors take store_as.
    const bool raw = t.dtype() == DType::i32 || t.dtype() == DType::u8;
    const size_t esize = raw ? dtype_size(t.dtype()) : dtype_size(store_as);
    return static_cast<uint64_t>(t.numel()) * esize;
}

namespace {

const char* stored_dtype_name(const Tensor& t, DType store_as) {
    if (t.dtype() == DType::i32) return "I32";
    if (t.dtype() == DType::u8) return "U8";
    return store_as == DType::bf16 ? "BF16" : "F32";
}

// Streams one tensor's data, converting between f32 and bf16 in bounded chunks.
void write_tensor_data(AtomicFileWriter& w, const Tensor& t, DType store_as) {
    const auto n = static_cast<size_t>(t.numel());
    if (t.dtype() == DType::i32 || t.dtype() == DType::u8 || t.dtype() == store_as) {
        w.write(t.data(), t.nbytes());
        return;
    }
    constexpr size_t kChunk = 1 << 16;
    if (store_as == DType::bf16) {  // f32 -> bf16
        std::vector<uint16_t> buf(std::min(n, kChunk));
        for (size_t i = 0; i < n; i += kChunk) {
            const size_t m = std::min(kChunk, n - i);
            for (size_t k = 0; k < m; ++k) buf[k] = f32_to_bf16(t.f32()[i + k]);
            w.write(buf.data(), m * 2);
        }
    } else {  // bf16 -> f32
        std::vector<float> buf(std::min(n, kChunk));
        for (size_t i = 0; i < n; i += kChunk) {
            const size_t m = std::min(kChunk, n - i);
            for (size_t k = 0; k < m; ++k) buf[k] = bf16_to_f32(t.bf16()[i + k]);
            w.write(buf.data(), m * 4);
        }
    }
}

}  // namespace

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata, DType store_as) {
    DF_CHECK(store_as == DType::f32 || store_as == DType::bf16,
             "cannot store float tensors as {} in {}; use f32 or bf16", dtype_name(store_as),
             quoted(path));
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::set<std::string> seen;
    uint64_t offset = 0;
    for (const auto& [name, t] : tensors) {
        DF_CHECK(!name.empty() && name != "__metadata__",
                 "invalid tensor name '{}' for {} (must be non-empty and not __metadata__)", name,
                 quoted(path));
        DF_CHECK(seen.insert(name).second, "tensor name '{}' given twice for {}", name,
                 quoted(path));
        DF_CHECK(t.device().kind == DeviceKind::cpu,
                 "tensor '{}' is on {}; copy it to the host before writing {}", name,
                 to_string(t.device()), quoted(path));
        DF_CHECK(t.numel() == 0 || t.data() != nullptr, "tensor '{}' has no data", name);
        const uint64_t n = stored_nbytes(t, store_as);
        header[name] = {{"dtype", stored_dtype_name(t, store_as)},
                        {"shape", t.shape().to_vector()},
                        {"data_offsets", {offset, offset + n}}};
        offset += n;
    }
    std::string text = header.dump();
    // Pad so that the data section starts 8-byte aligned (8 + header length is a multiple of 8).
    text.append((8 - text.size() % 8) % 8, ' ');
    const uint64_t len = text.size();

    std::filesystem::create_directories(path.parent_path().empty() ? "." : path.parent_path());
    AtomicFileWriter w(path);
    w.write(&len, 8);
    w.write(text.data(), text.size());
    for (const auto& [name, t] : tensors) write_tensor_data(w, t, store_as);
    w.commit();
}

}  // namespace dflash
