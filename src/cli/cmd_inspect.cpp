// `dflash inspect`.
#include "cli/commands.h"
#include "core/error.h"

namespace dflash::cli {

int cmd_inspect(CommandContext&) {
    DF_FAIL("`dflash inspect` is not implemented yet");
}

}  // namespace dflash::cli
