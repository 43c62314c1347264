// runtime.* -> RuntimeOptions (see runtime_options.h). Tested by tests/options/options_test.cpp.
#include "options/runtime_options.h"

namespace dflash {

RuntimeOptions runtime_options_from_settings(const config::Settings& s) {
    RuntimeOptions o;
    o.backend = s.get<std::string>("runtime.backend");
    o.threads = s.get<int64_t>("runtime.threads");
    o.devices = s.get<int64_t>("runtime.devices");
    o.device_ids = s.get<std::vector<int64_t>>("runtime.device_ids");
    o.seed = static_cast<uint64_t>(s.get<int64_t>("runtime.seed"));
    o.log_level = s.get<std::string>("runtime.log_level");
    o.gradient_exchange = s.get<std::string>("runtime.gradient_exchange");
    o.nccl_library = s.get<std::string>("runtime.nccl_library");
    o.collective_timeout_s = s.get<double>("runtime.collective_timeout_s");
    o.gradient_bucket_mb = s.get<double>("runtime.gradient_bucket_mb");
    return o;
}

}  // namespace dflash
