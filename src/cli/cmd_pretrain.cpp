// `dflash pretrain`.
#include "cli/commands.h"
#include "core/error.h"

namespace dflash::cli {

int cmd_pretrain(CommandContext&) {
    DF_FAIL("`dflash pretrain` is not implemented yet");
}

}  // namespace dflash::cli
