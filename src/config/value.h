// Setting types and values: the closed set of types a setting may have, strict parsing of the text
// forms that come from the environment and the command line, and the canonical/TOML/JSON/display
// renderings of a value. Tested by tests/config/value_test.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace dflash::config {

enum class Type { boolean, integer, real, string, enumeration, int_list, float_list, string_list };

// One alternative per storage type; an enum is stored as its choice string.
using Value = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>,
                           std::vector<double>, std::vector<std::string>>;

// "bool", "int", "float", "string", "enum", "list<int>", "list<float>", "list<string>".
std::string_view type_name(Type type);

// The variant index a value of `type` is stored under.
size_t storage_index(Type type);

// Strict parse of a scalar text form. Return false if `text` is not exactly one such value.
// Booleans accept only true/false/1/0; numbers must be consumed whole (no trailing junk) and floats
// must be finite.
bool parse_bool_text(std::string_view text, bool& out);
bool parse_int_text(std::string_view text, int64_t& out);
bool parse_float_text(std::string_view text, double& out);

// Splits a list text form: "1,9,17", "[1, 9, 17]", "" or "[]" (empty). Elements are trimmed and a
// pair of surrounding double quotes is removed (so a pasted TOML array of strings works).
std::vector<std::string> split_list_text(std::string_view text);

// A float printed as the shortest text that reads back to the same double, always with a '.' or an
// exponent so that TOML reads it as a float ("7.0", "0.0006", "1e-08").
std::string format_float(double x);

// The value as a TOML literal: strings quoted and escaped, lists in brackets. This is also the
// canonical form that the settings hash is computed over.
std::string toml_literal(const Value& value);

// The value for people: like toml_literal, but a non-empty scalar string is shown bare.
std::string display_value(const Value& value);

nlohmann::json to_json(const Value& value);

}  // namespace dflash::config
