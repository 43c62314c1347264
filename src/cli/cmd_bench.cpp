// `dflash bench`.
#include "cli/commands.h"
#include "core/error.h"

namespace dflash::cli {

int cmd_bench(CommandContext&) {
    DF_FAIL("`dflash bench` is not implemented yet");
}

}  // namespace dflash::cli
