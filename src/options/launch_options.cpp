// launch.* -> Launch (see launch_options.h). Tested by tests/comm/world_group_test.cpp and
// tests/comm/launch_secret_test.cpp.
#include "options/launch_options.h"

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
    l.secret_file = s.get<std::string>("launch.secret_file");
    l.secret_file_source = s.source("launch.secret_file");
    l.hello_timeout_s = s.get<double>("launch.hello_timeout_s");
    DF_CHECK(l.rank < l.world,
             "launch.rank={} ({}) but launch.world_size={} ({}): a rank must be below the number "
             "of processes",
             l.rank, l.rank_source, l.world, l.world_source);
    DF_CHECK(l.local_rank < l.local_world,
             "launch.local_rank={} ({}) but launch.local_world_size={} ({})", l.local_rank,
             s.source("launch.local_rank"), l.local_world, s.source("launch.local_world_size"));
    return l;
}

}  // namespace dflash
