// Input files (src/core/input_file.h): a regular file is read whole or line by line; a
// directory, /dev/zero, a FIFO (without hanging), a socket, a missing file and a symlink to any of
// those are refused with an error that says what the path is; a file over the cap, and a line over
// the line cap, are refused with the file and the cap named. Small caps stand in for real ones.
#include "core/input_file.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <thread>

#include "core/error.h"
#include "support/test_util.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::has;

// Runs `fn` on a thread and gives up after a deadline, so a read that blocks fails the test
// instead of hanging it (the stuck thread is left behind: the process is about to fail anyway).
std::string error_within_seconds(const std::function<void()>& fn, int seconds) {
    auto task = std::make_shared<std::packaged_task<std::string()>>([fn] { return error_of(fn); });
    auto result = task->get_future();
    std::thread([task] { (*task)(); }).detach();
    if (result.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready)
        return "TIMED OUT";
    return result.get();
}

TEST(InputFile, ReadsARegularFileAndFollowsSymlinks) {
    test::TempDir dir;
    test::write_file(dir / "a.json", "{\"x\": 1}");
    fs::create_symlink(dir / "a.json", dir / "link.json");
    EXPECT_EQ(read_input_file(dir / "a.json", 100, "config file"), "{\"x\": 1}");
    EXPECT_EQ(read_input_file(dir / "link.json", 100, "config file"), "{\"x\": 1}");
    EXPECT_EQ(read_input_file(dir / "a.json", 8, "config file"), "{\"x\": 1}");  // exactly the cap
    test::write_file(dir / "empty", "");
    EXPECT_EQ(read_input_file(dir / "empty", 8, "config file"), "");
}

TEST(InputFile, NonRegularFilesAreRefusedWithWhatTheyAre) {
    test::TempDir dir;
    fs::create_directories(dir / "adir");
    ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
    fs::create_symlink("/dev/zero", dir / "zero-link");
    fs::create_symlink(dir / "fifo", dir / "fifo-link");
    const std::pair<fs::path, const char*> cases[] = {
        {dir / "adir", "is a directory"},        {"/dev/zero", "is a character device"},
        {dir / "zero-link", "(-> '/dev/zero')"}, {dir / "fifo", "is a FIFO"},
        {dir / "fifo-link", "is a FIFO"},
    };
    for (const auto& [p, kind] : cases) {
        // A FIFO without a writer blocks a plain open() forever: a deadline catches that.
        const std::string e =
            error_within_seconds([&] { read_input_file(p, 1 << 20, "tokenizer file"); }, 20);
        EXPECT_TRUE(has(e, kind)) << p << ": " << e;
        EXPECT_TRUE(has(e, "tokenizer file '" + p.string() + "'")) << e;
        EXPECT_TRUE(has(e, "not a regular file")) << e;
        const std::string l =
            error_within_seconds([&] { InputLines lines(p, 1 << 20, "data file"); }, 20);
        EXPECT_TRUE(has(l, kind)) << p << ": " << l;
    }
    EXPECT_TRUE(has(
        error_of([&] { read_input_file(dir / "nope", 10, "prompts file"); }),
        "cannot open prompts file '" + (dir / "nope").string() + "': No such file or directory"));
}

TEST(InputFile, ASocketIsRefused) {
    test::TempDir dir;
    const fs::path p = dir / "sock";
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    ASSERT_LT(p.string().size(), sizeof(addr.sun_path));
    std::strncpy(addr.sun_path, p.c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_TRUE(has(error_of([&] { read_input_file(p, 10, "config file"); }), "is a socket"));
    ::close(fd);
}

TEST(InputFile, AFileOverTheCapIsRefusedNamingFileAndCap) {
    test::TempDir dir;
    test::write_file(dir / "big.toml", std::string(1000, '#'));
    const std::string e = error_of([&] { read_input_file(dir / "big.toml", 999, "config file"); });
    EXPECT_TRUE(has(e, "config file '" + (dir / "big.toml").string() + "' is 1000 bytes")) << e;
    EXPECT_TRUE(has(e, "the 999 bytes cap")) << e;
    EXPECT_EQ(read_input_file(dir / "big.toml", 1000, "config file").size(), 1000u);
    EXPECT_TRUE(has(byte_size_text(uint64_t{3} << 20), "3.0 MiB (3145728 bytes)"));
}

TEST(InputFile, LinesAreStreamedWithOffsets) {
    test::TempDir dir;
    // Lines longer than the read chunk (64 KiB) cross chunk boundaries.
    const std::string longline(200000, 'x');
    test::write_file(dir / "d.jsonl", "a\n\n" + longline + "\r\nlast");
    InputLines in(dir / "d.jsonl", 1 << 20, "data file");
    EXPECT_EQ(in.file_bytes(), 2 + 1 + longline.size() + 2 + 4);
    std::string line;
    ASSERT_TRUE(in.next(line));
    EXPECT_EQ(line, "a");
    EXPECT_EQ(in.line_number(), 1);
    EXPECT_EQ(in.offset(), 2u);
    ASSERT_TRUE(in.next(line));
    EXPECT_EQ(line, "");
    ASSERT_TRUE(in.next(line));
    EXPECT_EQ(line, longline + "\r");
    EXPECT_EQ(in.line_number(), 3);
    ASSERT_TRUE(in.next(line));
    EXPECT_EQ(line, "last");
    EXPECT_EQ(in.offset(), in.file_bytes());
    EXPECT_FALSE(in.next(line));
    EXPECT_FALSE(in.next(line));
}

TEST(InputFile, ALineOverTheLineCapIsRefusedNamingFileLineAndCap) {
    test::TempDir dir;
    // Without a newline anywhere (as /dev/zero would be) and with one after the long line.
    for (const std::string tail : {"", "\n{}\n"}) {
        test::write_file(dir / "d.jsonl", "{}\n" + std::string(300000, ' ') + tail);
        InputLines in(dir / "d.jsonl", 100000, "data file");
        std::string line;
        ASSERT_TRUE(in.next(line));
        const std::string e = error_of([&] { in.next(line); });
        EXPECT_TRUE(has(e, "data file '" + (dir / "d.jsonl").string() + "': line 2 is longer"))
            << e;
        EXPECT_TRUE(has(e, "97.7 KiB (100000 bytes) cap")) << e;
    }
    // Exactly at the cap is fine.
    test::write_file(dir / "d.jsonl", std::string(100, 'y') + "\n");
    InputLines in(dir / "d.jsonl", 100, "data file");
    std::string line;
    EXPECT_TRUE(in.next(line));
    EXPECT_EQ(line.size(), 100u);
}

}  // namespace
}  // namespace dflash
