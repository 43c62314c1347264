// Launch settings (see launch.h). Tested by tests/comm/world_group_test.cpp.
#include "comm/launch.h"

#include <sstream>

#include "core/error.h"

namespace dflash {

Launch launch_from_settings(const config::Settings& s) {
    Launch l;
    l.rank = static_cast<int>(s.get<int64_t>("launch.rank"));
    l.world = static_cast<int>(s.get<int64_t>("launch.world_size"));
    l.local_rank = static_cast<int>(s.get<int64_t>("launch.local_rank"));
    l.local_world = static_cast<int>(s.get<int64_t>("launch.local_world_size"));
    l.master_addr = s.get<std::string>("launch.master_addr");
    l.master_port = static_cast<int>(s.get<int64_t>("launch.master_port"));
    l.timeout_s = s.get<double>("launch.timeout_s");
    l.rank_source = s.source("launch.rank");
    l.world_source = s.source("launch.world_size");
    DF_CHECK(l.rank < l.world,
             "launch.rank={} ({}) but launch.world_size={} ({}): a rank must be below the number "
             "of processes",
             l.rank, l.rank_source, l.world, l.world_source);
    DF_CHECK(l.local_rank < l.local_world,
             "launch.local_rank={} ({}) but launch.local_world_size={} ({})", l.local_rank,
             s.source("launch.local_rank"), l.local_world, s.source("launch.local_world_size"));
    return l;
}

std::string launch_agreement(const config::Settings& s) {
    std::istringstream in(s.canonical_text());
    std::string out, line;
    while (std::getline(in, line))
        if (!line.starts_with("launch.") && !line.starts_with("runtime.log_level"))
            out += line + "\n";
    return out;
}

std::unique_ptr<TcpGroup> join_processes(const Launch& l, const std::string& agreement) {
    if (l.world == 1) return nullptr;
    TcpGroupOptions o;
    o.rank = l.rank;
    o.world = l.world;
    o.master_addr = l.master_addr;
    o.master_port = l.master_port;
    o.timeout_s = l.timeout_s;
    o.agreement = agreement;
    return std::make_unique<TcpGroup>(o);
}

}  // namespace dflash
