// The chat.* settings as ChatOptions (tokenizer/chat_template.h): the one place they are read
// by key. Tested by tests/options/options_test.cpp.
#pragma once

#include "config/settings.h"
#include "tokenizer/chat_template.h"

namespace dflash {

ChatOptions chat_options_from_settings(const config::Settings& s);

}  // namespace dflash
