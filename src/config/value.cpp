// Parsing and rendering of setting values (see value.h). Tested by tests/config/value_test.cpp.
#include "config/value.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "core/error.h"

namespace dflash::config {
namespace {

std::string_view trim(std::string_view s) {
    const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

std::string quote_toml(std::string_view s) {
    std::string out = "\"";
    for (const char c : s) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\r':
                out += "\\r";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
                    out += fmt::format("\\u{:04X}", static_cast<unsigned>(c));
                } else {
                    out += c;
                }
        }
    }
    out += '"';
    return out;
}

template <typename T, typename F>
std::string join_list(const std::vector<T>& items, F&& render) {
    std::string out = "[";
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += render(items[i]);
    }
    out += ']';
    return out;
}

}  // namespace

std::string_view type_name(Type type) {
    switch (type) {
        case Type::boolean:
            return "bool";
        case Type::integer:
            return "int";
        case Type::real:
            return "float";
        case Type::string:
            return "string";
        case Type::enumeration:
            return "enum";
        case Type::int_list:
            return "list<int>";
        case Type::float_list:
            return "list<float>";
        case Type::string_list:
            return "list<string>";
    }
    return "?";
}

size_t storage_index(Type type) {
    switch (type) {
        case Type::boolean:
            return 0;
        case Type::integer:
            return 1;
        case Type::real:
            return 2;
        case Type::string:
        case Type::enumeration:
            return 3;
        case Type::int_list:
            return 4;
        case Type::float_list:
            return 5;
        case Type::string_list:
            return 6;
    }
    DF_ASSERT(false, "unknown setting type {}", static_cast<int>(type));
}

bool parse_bool_text(std::string_view text, bool& out) {
    if (text == "true" || text == "1") {
        out = true;
        return true;
    }
    if (text == "false" || text == "0") {
        out = false;
        return true;
    }
    return false;
}

bool parse_int_text(std::string_view text, int64_t& out) {
    if (text.empty()) return false;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, out);
    return ec == std::errc() && ptr == end;
}

bool parse_float_text(std::string_view text, double& out) {
    if (text.empty()) return false;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, out, std::chars_format::general);
    return ec == std::errc() && ptr == end && std::isfinite(out);
}

std::vector<std::string> split_list_text(std::string_view text) {
    text = trim(text);
    if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
        text = trim(text.substr(1, text.size() - 2));
    }
    std::vector<std::string> items;
    if (text.empty()) return items;
    size_t start = 0;
    while (true) {
        const size_t comma = text.find(',', start);
        std::string_view item = trim(text.substr(start, comma - start));
        if (item.size() >= 2 && item.front() == '"' && item.back() == '"') {
            item = item.substr(1, item.size() - 2);
        }
        items.emplace_back(item);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return items;
}

std::string format_float(double x) {
    std::string s = fmt::format("{}", x);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // 'n': inf/nan stay as they are
    return s;
}

std::string toml_literal(const Value& value) {
    struct Render {
        std::string operator()(bool b) const { return b ? "true" : "false"; }
        std::string operator()(int64_t i) const { return std::to_string(i); }
        std::string operator()(double d) const { return format_float(d); }
        std::string operator()(const std::string& s) const { return quote_toml(s); }
        std::string operator()(const std::vector<int64_t>& v) const {
            return join_list(v, [](int64_t i) { return std::to_string(i); });
        }
        std::string operator()(const std::vector<double>& v) const {
            return join_list(v, [](double d) { return format_float(d); });
        }
        std::string operator()(const std::vector<std::string>& v) const {
            return join_list(v, [](const std::string& s) { return quote_toml(s); });
        }
    };
    return std::visit(Render{}, value);
}

std::string display_value(const Value& value) {
    if (const auto* s = std::get_if<std::string>(&value); s && !s->empty()) return *s;
    return toml_literal(value);
}

nlohmann::json to_json(const Value& value) {
    return std::visit([](const auto& v) { return nlohmann::json(v); }, value);
}

}  // namespace dflash::config
