// `dflash data`.
#include "cli/commands.h"
#include "core/error.h"

namespace dflash::cli {

int cmd_data(CommandContext&) {
    DF_FAIL("`dflash data` is not implemented yet");
}

}  // namespace dflash::cli
