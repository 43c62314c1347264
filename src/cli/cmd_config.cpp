// `dflash config`.
#include "cli/commands.h"
#include "core/error.h"

namespace dflash::cli {

int cmd_config(CommandContext&) {
    DF_FAIL("`dflash config` is not implemented yet");
}

}  // namespace dflash::cli
