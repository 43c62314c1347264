// `dflash train`.
#include "cli/commands.h"
#include "core/error.h"

namespace dflash::cli {

int cmd_train(CommandContext&) {
    DF_FAIL("`dflash train` is not implemented yet");
}

}  // namespace dflash::cli
