// TOML layer of the settings (see toml_file.h). Tested by tests/config/toml_file_test.cpp.
#include "config/toml_file.h"

#include <fmt/format.h>

#include <toml++/toml.h>

#include "core/error.h"

namespace dflash::config {
namespace {

std::string_view node_kind(const toml::node& node) {
    switch (node.type()) {
        case toml::node_type::table:
            return "a table";
        case toml::node_type::array:
            return "an array";
        case toml::node_type::string:
            return "a string";
        case toml::node_type::integer:
            return "an integer";
        case toml::node_type::floating_point:
            return "a float";
        case toml::node_type::boolean:
            return "a boolean";
        default:
            return "a date/time";
    }
}

std::string node_text(const toml::node& node) {
    // Strings as the user most likely wrote them (toml++ would print 'single quotes').
    if (const auto* str = node.as_string()) return toml_literal(Value(str->get()));
    std::ostringstream os;
    node.visit([&](const auto& n) { os << n; });
    return os.str();
}

// One scalar element as `type`; false when the TOML type does not fit.
bool scalar_from_node(const toml::node& node, Type type, Value& out) {
    switch (type) {
        case Type::boolean:
            if (!node.is_boolean()) return false;
            out = node.as_boolean()->get();
            return true;
        case Type::integer:
            if (!node.is_integer()) return false;
            out = node.as_integer()->get();
            return true;
        case Type::real:
            // An integer is accepted for a float: `loss_decay_gamma = 7` means 7.0.
            if (node.is_integer()) {
                out = static_cast<double>(node.as_integer()->get());
                return true;
            }
            if (!node.is_floating_point()) return false;
            out = node.as_floating_point()->get();
            return true;
        case Type::string:
        case Type::enumeration:
            if (!node.is_string()) return false;
            out = node.as_string()->get();
            return true;
        default:
            return false;
    }
}

template <class T>
bool list_from_node(const toml::array& array, Type elem_type, Value& out) {
    std::vector<T> items;
    for (const auto& elem : array) {
        Value v;
        if (!scalar_from_node(elem, elem_type, v)) return false;
        items.push_back(std::get<T>(v));
    }
    out = std::move(items);
    return true;
}

bool value_from_node(const toml::node& node, Type type, Value& out) {
    const toml::array* array = node.as_array();
    switch (type) {
        case Type::int_list:
            return array && list_from_node<int64_t>(*array, Type::integer, out);
        case Type::float_list:
            return array && list_from_node<double>(*array, Type::real, out);
        case Type::string_list:
            return array && list_from_node<std::string>(*array, Type::string, out);
        default:
            return scalar_from_node(node, type, out);
    }
}

std::string toml_form(Type type) {
    switch (type) {
        case Type::boolean:
            return "a TOML boolean (true or false, unquoted)";
        case Type::integer:
            return "a TOML integer";
        case Type::real:
            return "a TOML float or integer";
        case Type::string:
        case Type::enumeration:
            return "a TOML string (quoted)";
        case Type::int_list:
            return "a TOML array of integers";
        case Type::float_list:
            return "a TOML array of numbers";
        case Type::string_list:
            return "a TOML array of strings";
    }
    return "?";
}

struct Walker {
    const Registry& registry;
    const std::string& name;
    std::vector<Assignment>& out;

    std::string where(const toml::node& node) const {
        return fmt::format("file:{}:{}", name, node.source().begin.line);
    }

    void walk(const toml::table& table, const std::string& prefix) {
        for (const auto& [k, node] : table) {
            const std::string path =
                prefix.empty() ? std::string(k.str()) : fmt::format("{}.{}", prefix, k.str());
            const Declaration* decl = registry.find(path);
            if (!decl && node.is_table()) {
                // An empty or misspelt section is reported too, not skipped silently.
                if (!registry.is_namespace(path)) {
                    const toml::table& sub = *node.as_table();
                    const std::string probe =
                        sub.empty() ? path : fmt::format("{}.{}", path, sub.cbegin()->first.str());
                    registry.fail_unknown(probe, where(node));
                }
                walk(*node.as_table(), path);
                continue;
            }
            if (!decl) registry.fail_unknown(path, where(node));
            Value value;
            DF_CHECK(value_from_node(node, decl->type, value),
                     "setting `{}` = {} (from {}) is {}: expected {} ({})", path, node_text(node),
                     where(node), node_kind(node), toml_form(decl->type), type_name(decl->type));
            registry.check(*decl, value, where(node));
            out.push_back({path, std::move(value), where(node)});
        }
    }
};

}  // namespace

std::vector<Assignment> parse_toml_text(const Registry& registry, std::string_view text,
                                        const std::string& name) {
    toml::table root;
    try {
        root = toml::parse(text, name);
    } catch (const toml::parse_error& e) {
        DF_FAIL("config file {}:{}:{} is not valid TOML: {}", name, e.source().begin.line,
                e.source().begin.column, e.description());
    }
    std::vector<Assignment> out;
    Walker{registry, name, out}.walk(root, "");
    return out;
}

std::vector<Assignment> load_toml_file(const Registry& registry, const std::string& path,
                                       uint64_t max_bytes) {
    return parse_toml_text(registry, read_input_file(path, max_bytes, "config file"), path);
}

}  // namespace dflash::config
