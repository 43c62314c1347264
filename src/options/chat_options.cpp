// chat.* -> ChatOptions (see chat_options.h). Tested by tests/options/options_test.cpp.
#include "options/chat_options.h"

namespace dflash {

ChatOptions chat_options_from_settings(const config::Settings& s) {
    ChatOptions c;
    c.template_name = s.get<std::string>("chat.template");
    c.enable_thinking = s.get<bool>("chat.enable_thinking");
    c.date_string = s.get<std::string>("chat.date_string");
    c.reasoning_effort = s.get<std::string>("chat.reasoning_effort");
    c.current_date = s.get<std::string>("chat.current_date");
    c.model_identity = s.get<std::string>("chat.model_identity");
    return c;
}

}  // namespace dflash
