// Launch settings (see launch.h). Tested by tests/comm/world_group_test.cpp and
// tests/comm/launch_secret_test.cpp.
#include "comm/launch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <sstream>
#include <system_error>

#include "core/error.h"

namespace dflash {

std::string launch_agreement(const config::Settings& s) {
    std::istringstream in(s.canonical_text());
    std::string out, line;
    while (std::getline(in, line))
        if (!line.starts_with("launch.") && !line.starts_with("runtime.log_level"))
            out += line + "\n";
    return out;
}

std::string read_launch_secret(const std::string& path, const std::string& source) {
    // Checked on the open descriptor, so the file read is the file checked.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    DF_CHECK(fd >= 0, "launch.secret_file '{}' ({}) cannot be opened: {}", path, source,
             std::system_category().message(errno));
    std::string secret;
    try {
        struct stat st {};
        DF_CHECK(::fstat(fd, &st) == 0 && S_ISREG(st.st_mode),
                 "launch.secret_file '{}' ({}) is not a regular file", path, source);
        DF_CHECK(st.st_uid == ::geteuid(),
                 "launch.secret_file '{}' ({}) belongs to user id {}, not to this user ({}): "
                 "the launch secret must be a file of the job's own user",
                 path, source, st.st_uid, ::geteuid());
        DF_CHECK((st.st_mode & 077) == 0,
                 "launch.secret_file '{}' ({}) can be read or written by group or others (mode "
                 "{:03o}); anyone who reads it could join the run: chmod 600 '{}'",
                 path, source, st.st_mode & 0777, path);
        char buf[4096];
        while (true) {
            const ssize_t k = ::read(fd, buf, sizeof(buf));
            if (k < 0 && errno == EINTR) continue;
            DF_CHECK(k >= 0, "launch.secret_file '{}' ({}) cannot be read: {}", path, source,
                     std::system_category().message(errno));
            if (k == 0) break;
            secret.append(buf, static_cast<size_t>(k));
            DF_CHECK(secret.size() <= (1u << 16),
                     "launch.secret_file '{}' ({}) is over 64 KiB: "
                     "is it the right file?",
                     path, source);
        }
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);
    // `openssl rand -hex 32 > FILE` ends the secret with a newline; an editor may add one.
    while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back())))
        secret.pop_back();
    DF_CHECK(secret.size() >= 16,
             "launch.secret_file '{}' ({}) holds {} bytes; a launch secret needs at least 16 (make "
             "one with: openssl rand -hex 32 > FILE; chmod 600 FILE)",
             path, source, secret.size());
    return secret;
}

std::unique_ptr<TcpGroup> join_processes(const Launch& l, const std::string& agreement,
                                         const Logger& log) {
    if (l.world == 1) return nullptr;
    TcpGroupOptions o;
    o.rank = l.rank;
    o.world = l.world;
    o.master_addr = l.master_addr;
    o.master_port = l.master_port;
    o.timeout_s = l.timeout_s;
    o.agreement = agreement;
    o.hello_timeout_s = l.hello_timeout_s;
    o.log = log;
    if (!l.secret_file.empty()) o.secret = read_launch_secret(l.secret_file, l.secret_file_source);
    return std::make_unique<TcpGroup>(o);
}

}  // namespace dflash
