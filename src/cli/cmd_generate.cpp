// `dflash generate`.
#include "cli/commands.h"
#include "core/error.h"

namespace dflash::cli {

int cmd_generate(CommandContext&) {
    DF_FAIL("`dflash generate` is not implemented yet");
}

}  // namespace dflash::cli
