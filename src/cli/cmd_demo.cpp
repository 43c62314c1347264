// `dflash demo`.
#include "cli/commands.h"
#include "core/error.h"

namespace dflash::cli {

int cmd_demo(CommandContext&) {
    DF_FAIL("`dflash demo` is not implemented yet");
}

}  // namespace dflash::cli
