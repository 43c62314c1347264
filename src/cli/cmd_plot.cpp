// `dflash plot`.
#include "cli/commands.h"
#include "core/error.h"

namespace dflash::cli {

int cmd_plot(CommandContext&) {
    DF_FAIL("`dflash plot` is not implemented yet");
}

}  // namespace dflash::cli
