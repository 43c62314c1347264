// Shard writer and reader (format in docs/data.md). Tested by tests/data/shard_test.cpp.
#include "data/shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/input_file.h"

namespace dflash {

// The format is little-endian; the raw copies below rely on the host being so too.
static_assert(std::endian::native == std::endian::little, "dfshard I/O assumes little-endian");

namespace {

constexpr uint64_t kMaxTokenizerName = 4096;

uint64_t round_up8(uint64_t n) {
    return (n + 7) / 8 * 8;
}

uint64_t header_bytes_for(uint64_t name_len) {
    return round_up8(kShardFixedHeaderBytes + name_len) + 8;  // + header checksum
}

template <typename T>
void put(std::vector<uint8_t>& buf, uint64_t off, T v) {
    std::memcpy(buf.data() + off, &v, sizeof(T));
}

template <typename T>
T get(const std::vector<uint8_t>& buf, uint64_t off) {
    T v;
    std::memcpy(&v, buf.data() + off, sizeof(T));
    return v;
}

uint64_t sample_checksum(std::span<const int32_t> tokens, std::span<const uint8_t> mask) {
    const uint64_t h =
        fnv1a64({reinterpret_cast<const uint8_t*>(tokens.data()), tokens.size() * sizeof(int32_t)});
    return fnv1a64(mask, h);
}

}  // namespace

// ---- writer ------------------------------------------------------------------------------------

ShardWriter::ShardWriter(std::filesystem::path path, std::string tokenizer_name, int64_t vocab_size)
    : path_(std::move(path)), tokenizer_(std::move(tokenizer_name)), vocab_size_(vocab_size) {
    DF_CHECK(vocab_size_ > 0 && vocab_size_ <= INT32_MAX, "shard vocab_size={} must be in 1..{}",
             vocab_size_, INT32_MAX);
    DF_CHECK(tokenizer_.size() <= kMaxTokenizerName, "tokenizer name is {} bytes; at most {}",
             tokenizer_.size(), kMaxTokenizerName);
}

void ShardWriter::add(const Encoded& s) {
    DF_CHECK(!finished_, "shard {} is already finished", path_.string());
    DF_CHECK(s.tokens.size() == s.loss_mask.size(),
             "sample {} has {} tokens but {} loss-mask values; they must match", num_samples(),
             s.tokens.size(), s.loss_mask.size());
    DF_CHECK(!s.tokens.empty(), "sample {} has no tokens", num_samples());
    for (size_t i = 0; i < s.tokens.size(); ++i) {
        DF_CHECK(s.tokens[i] >= 0 && s.tokens[i] < vocab_size_,
                 "sample {} token {} has id {}, outside the vocabulary 0..{}", num_samples(), i,
                 s.tokens[i], vocab_size_ - 1);
        DF_CHECK(s.loss_mask[i] <= 1, "sample {} loss_mask[{}]={}; expected 0 or 1", num_samples(),
                 i, s.loss_mask[i]);
    }
    lengths_.push_back(s.tokens.size());
    tokens_.insert(tokens_.end(), s.tokens.begin(), s.tokens.end());
    loss_mask_.insert(loss_mask_.end(), s.loss_mask.begin(), s.loss_mask.end());
}

void ShardWriter::finish() {
    DF_CHECK(!finished_, "shard {} is already finished", path_.string());
    const uint64_t n = lengths_.size();
    const uint64_t hbytes = header_bytes_for(tokenizer_.size());
    std::vector<uint8_t> head(hbytes + n * kShardIndexEntryBytes + 8, 0);
    std::memcpy(head.data(), kShardMagic, sizeof(kShardMagic));
    put<uint32_t>(head, 8, kShardVersion);
    put<uint32_t>(head, 12, static_cast<uint32_t>(hbytes));
    put<uint64_t>(head, 16, n);
    put<uint64_t>(head, 24, tokens_.size());
    put<uint64_t>(head, 32, static_cast<uint64_t>(vocab_size_));
    put<uint32_t>(head, 40, static_cast<uint32_t>(tokenizer_.size()));
    put<uint32_t>(head, 44, 0);  // flags, none defined yet
    std::memcpy(head.data() + kShardFixedHeaderBytes, tokenizer_.data(), tokenizer_.size());
    put<uint64_t>(head, hbytes - 8, fnv1a64({head.data(), hbytes - 8}));
    uint64_t start = 0;
    for (uint64_t i = 0; i < n; ++i) {
        const uint64_t off = hbytes + i * kShardIndexEntryBytes;
        const std::span<const int32_t> t(tokens_.data() + start, lengths_[i]);
        const std::span<const uint8_t> m(loss_mask_.data() + start, lengths_[i]);
        put<uint64_t>(head, off, start);
        put<uint64_t>(head, off + 8, lengths_[i]);
        put<uint64_t>(head, off + 16, sample_checksum(t, m));
        start += lengths_[i];
    }
    const uint64_t index_end = hbytes + n * kShardIndexEntryBytes;
    const uint64_t content = fnv1a64({head.data() + hbytes, n * kShardIndexEntryBytes});
    put<uint64_t>(head, index_end, content);

    AtomicFileWriter out(path_);  // "<path>.tmp", fsync'ed, then renamed
    out.write(head.data(), head.size());
    out.write(tokens_.data(), tokens_.size() * sizeof(int32_t));
    out.write(loss_mask_.data(), loss_mask_.size());
    out.commit();
    finished_ = true;
    info_ = {kShardVersion, num_samples(), num_tokens(), vocab_size_, tokenizer_, content};
}

// ---- reader ------------------------------------------------------------------------------------

ShardReader::ShardReader(std::filesystem::path path) : path_(std::move(path)) {
    // A regular file only: a FIFO or a device in a shard's place is refused, not waited on.
    fd_ = open_input_file(path_, "shard", file_bytes_);
    try {
        load_header_and_index();
    } catch (...) {
        ::close(fd_);
        fd_ = -1;
        throw;
    }
}

ShardReader::~ShardReader() {
    if (fd_ >= 0) ::close(fd_);
}

ShardReader::ShardReader(ShardReader&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      file_bytes_(o.file_bytes_),
      info_(std::move(o.info_)),
      tokens_offset_(o.tokens_offset_),
      mask_offset_(o.mask_offset_),
      starts_(std::move(o.starts_)),
      checks_(std::move(o.checks_)) {}

ShardReader& ShardReader::operator=(ShardReader&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) ::close(fd_);
        path_ = std::move(o.path_);
        fd_ = std::exchange(o.fd_, -1);
        file_bytes_ = o.file_bytes_;
        info_ = std::move(o.info_);
        tokens_offset_ = o.tokens_offset_;
        mask_offset_ = o.mask_offset_;
        starts_ = std::move(o.starts_);
        checks_ = std::move(o.checks_);
    }
    return *this;
}

void ShardReader::read_exact(uint64_t offset, void* dst, uint64_t n, const char* what) const {
    DF_CHECK(offset + n <= file_bytes_,
             "shard {} is truncated: reading {} needs bytes {}..{} but the file ends at byte "
             "offset {} (re-create it with `dflash data prepare`)",
             path_.string(), what, offset, offset + n, file_bytes_);
    auto* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
        const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
        if (r < 0 && errno == EINTR) continue;
        DF_CHECK(r > 0, "shard {}: read of {} failed at byte offset {}: {}", path_.string(), what,
                 offset, r == 0 ? "unexpected end of file" : std::strerror(errno));
        p += r;
        offset += static_cast<uint64_t>(r);
        n -= static_cast<uint64_t>(r);
    }
}

void ShardReader::load_header_and_index() {
    const std::string f = path_.string();
    std::vector<uint8_t> fixed(kShardFixedHeaderBytes);
    // The magic first, so that a short file of another kind is not reported as a truncated shard.
    read_exact(0, fixed.data(), std::min<uint64_t>(file_bytes_, sizeof(kShardMagic)), "the magic");
    DF_CHECK(file_bytes_ >= sizeof(kShardMagic) ||
                 std::memcmp(fixed.data(), kShardMagic, file_bytes_) != 0,
             "shard {} is truncated: the file ends at byte offset {}, inside the header", f,
             file_bytes_);
    DF_CHECK(file_bytes_ >= sizeof(kShardMagic) &&
                 std::memcmp(fixed.data(), kShardMagic, sizeof(kShardMagic)) == 0,
             "{} is not a dflash shard: wrong magic at byte offset 0 (expected \"DFSHARD\")", f);
    read_exact(0, fixed.data(), fixed.size(), "the header");
    info_.version = get<uint32_t>(fixed, 8);
    DF_CHECK(info_.version <= kShardVersion,
             "shard {} has format version {} (at byte offset 8) but this dflash reads up to "
             "version {}; upgrade dflash",
             f, info_.version, kShardVersion);
    DF_CHECK(info_.version >= 1, "shard {} has invalid format version 0 at byte offset 8", f);
    const uint64_t hbytes = get<uint32_t>(fixed, 12);
    const uint64_t name_len = get<uint32_t>(fixed, 40);
    DF_CHECK(name_len <= kMaxTokenizerName && hbytes == header_bytes_for(name_len),
             "shard {} has a corrupt header: header size {} (byte offset 12) does not match the "
             "tokenizer name length {} (byte offset 40)",
             f, hbytes, name_len);
    std::vector<uint8_t> head(hbytes);
    read_exact(0, head.data(), hbytes, "the header");
    DF_CHECK(fnv1a64({head.data(), hbytes - 8}) == get<uint64_t>(head, hbytes - 8),
             "shard {} has a corrupt header: the checksum at byte offset {} does not match bytes "
             "0..{}",
             f, hbytes - 8, hbytes - 8);
    const uint64_t n = get<uint64_t>(head, 16);
    const uint64_t t = get<uint64_t>(head, 24);
    info_.num_samples = static_cast<int64_t>(n);
    info_.num_tokens = static_cast<int64_t>(t);
    info_.vocab_size = static_cast<int64_t>(get<uint64_t>(head, 32));
    info_.tokenizer.assign(reinterpret_cast<const char*>(head.data() + kShardFixedHeaderBytes),
                           name_len);
    // The checksum vouches for the header, so from here on a size mismatch means the file was
    // truncated or appended to.
    DF_CHECK(t <= file_bytes_,
             "shard {} is truncated: its header claims {} tokens but the file "
             "ends at byte offset {}",
             f, t, file_bytes_);
    const uint64_t index_end = hbytes + n * kShardIndexEntryBytes;
    DF_CHECK(n <= file_bytes_ / kShardIndexEntryBytes && file_bytes_ >= index_end + 8,
             "shard {} is truncated: the file ends at byte offset {}, inside the sample index "
             "(entry {} of {}, bytes {}..{})",
             f, file_bytes_, (std::max(file_bytes_, hbytes) - hbytes) / kShardIndexEntryBytes, n,
             hbytes, index_end + 8);
    load_index(hbytes, n, t);
    tokens_offset_ = index_end + 8;
    mask_offset_ = tokens_offset_ + t * sizeof(int32_t);
    const uint64_t expected = mask_offset_ + t;
    if (file_bytes_ < expected) {
        const bool in_tokens = file_bytes_ < mask_offset_;
        const uint64_t tok = in_tokens ? (file_bytes_ - tokens_offset_) / sizeof(int32_t)
                                       : file_bytes_ - mask_offset_;
        const auto it = std::upper_bound(starts_.begin(), starts_.end(), tok);
        DF_FAIL(
            "shard {} is truncated: the file ends at byte offset {}, inside the {} of sample {} "
            "(the {} samples / {} tokens need {} bytes); re-create it with `dflash data prepare`",
            f, file_bytes_, in_tokens ? "tokens" : "loss mask", (it - starts_.begin()) - 1, n, t,
            expected);
    }
    DF_CHECK(file_bytes_ == expected,
             "shard {} has {} unexpected bytes after byte offset {} (the end of its data)", f,
             file_bytes_ - expected, expected);
}

void ShardReader::load_index(uint64_t hbytes, uint64_t n, uint64_t t) {
    const std::string f = path_.string();
    const uint64_t index_end = hbytes + n * kShardIndexEntryBytes;
    std::vector<uint8_t> index(n * kShardIndexEntryBytes + 8);
    read_exact(hbytes, index.data(), index.size(), "the index");
    DF_CHECK(fnv1a64({index.data(), n * kShardIndexEntryBytes}) ==
                 get<uint64_t>(index, n * kShardIndexEntryBytes),
             "shard {} has a corrupt sample index: the checksum at byte offset {} does not match "
             "bytes {}..{}",
             f, index_end, hbytes, index_end);
    info_.content_checksum = get<uint64_t>(index, n * kShardIndexEntryBytes);
    starts_.resize(n + 1);
    checks_.resize(n);
    uint64_t pos = 0;
    for (uint64_t i = 0; i < n; ++i) {
        const uint64_t start = get<uint64_t>(index, i * kShardIndexEntryBytes);
        const uint64_t len = get<uint64_t>(index, i * kShardIndexEntryBytes + 8);
        DF_CHECK(start == pos && len > 0 && len <= t - pos,
                 "shard {} sample {} index entry (byte offset {}) is inconsistent: start {} "
                 "length {} (expected start {}, {} tokens in total)",
                 f, i, hbytes + i * kShardIndexEntryBytes, start, len, pos, t);
        starts_[i] = start;
        checks_[i] = get<uint64_t>(index, i * kShardIndexEntryBytes + 16);
        pos += len;
    }
    starts_[n] = pos;
    DF_CHECK(pos == t, "shard {} index covers {} tokens but the header says {}", f, pos, t);
}

int64_t ShardReader::sample_length(int64_t i) const {
    DF_CHECK(i >= 0 && i < info_.num_samples, "sample {} is out of range for shard {} ({} samples)",
             i, path_.string(), info_.num_samples);
    return static_cast<int64_t>(starts_[i + 1] - starts_[i]);
}

Encoded ShardReader::read(int64_t i) const {
    const uint64_t len = static_cast<uint64_t>(sample_length(i));
    const uint64_t start = starts_[i];
    Encoded s;
    s.tokens.resize(len);
    s.loss_mask.resize(len);
    const uint64_t tok_off = tokens_offset_ + start * sizeof(int32_t);
    read_exact(tok_off, s.tokens.data(), len * sizeof(int32_t), "sample tokens");
    read_exact(mask_offset_ + start, s.loss_mask.data(), len, "sample loss mask");
    DF_CHECK(sample_checksum(s.tokens, s.loss_mask) == checks_[i],
             "shard {} sample {} is corrupt: its checksum does not match (tokens at byte offset "
             "{}, loss mask at byte offset {}, {} tokens); re-create the shard",
             path_.string(), i, tok_off, mask_offset_ + start, len);
    for (uint64_t k = 0; k < len; ++k) {
        DF_CHECK(s.tokens[k] >= 0 && s.tokens[k] < info_.vocab_size && s.loss_mask[k] <= 1,
                 "shard {} sample {} token {} (byte offset {}) has id {} / mask {}; expected an "
                 "id in 0..{} and a mask of 0 or 1",
                 path_.string(), i, k, tok_off + k * sizeof(int32_t), s.tokens[k], s.loss_mask[k],
                 info_.vocab_size - 1);
    }
    return s;
}

void ShardReader::verify_all() const {
    for (int64_t i = 0; i < info_.num_samples; ++i) (void)read(i);
}

std::vector<std::filesystem::path> list_shards(const std::filesystem::path& dir) {
    std::error_code ec;
    DF_CHECK(std::filesystem::is_directory(dir, ec),
             "dataset directory {} does not exist or is not a directory", dir.string());
    std::vector<std::filesystem::path> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        if (e.is_regular_file() && e.path().extension() == kShardExtension) {
            out.push_back(e.path());
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace dflash
