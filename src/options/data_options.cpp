// data.* -> train::DataOptions (see data_options.h). Tested by tests/options/options_test.cpp and
// tests/train/data_order_test.cpp.
#include "options/data_options.h"

namespace dflash {

train::DataOptions data_options_from_settings(const config::Settings& s) {
    train::DataOptions o;
    o.shuffle = s.get<bool>("data.shuffle");
    o.pack = s.get<bool>("data.pack");
    return o;
}

}  // namespace dflash
