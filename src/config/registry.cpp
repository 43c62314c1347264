// Declarations, set-time validation and nearest-key suggestions (see registry.h).
// Tested by tests/config/registry_test.cpp.
#include "config/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dflash::config {
namespace {

bool valid_key(std::string_view key) {
    if (key.empty() || key.front() == '.' || key.back() == '.') return false;
    char prev = 0;
    for (const char c : key) {
        const bool ok =
            (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
        if (!ok || (c == '.' && prev == '.')) return false;
        prev = c;
    }
    return true;
}

std::string number_text(double x) {
    // Integral bounds print without a fraction so int ranges read naturally ("[1, 16]").
    if (std::fabs(x) < 1e15 && x == std::floor(x))
        return fmt::format("{}", static_cast<int64_t>(x));
    return fmt::format("{}", x);
}

// What a value of the declaration's type must look like, for error messages.
std::string expectation(const Declaration& d) {
    std::string what;
    switch (d.type) {
        case Type::boolean:
            return "a bool (true, false, 1 or 0)";
        case Type::enumeration:
            return fmt::format("one of {}", d.constraint_text());
        case Type::string:
            return "a string";
        case Type::integer:
            what = "an int";
            break;
        case Type::real:
            what = "a float";
            break;
        case Type::int_list:
            what = "a list of ints (1,9,17 or [1,9,17])";
            break;
        case Type::float_list:
            what = "a list of floats (0.5,1e-3 or [0.5,1e-3])";
            break;
        case Type::string_list:
            what = "a list of strings (a,b or [a,b])";
            break;
    }
    const std::string range = d.constraint_text();
    if (range.empty()) return what;
    const bool is_list = d.type == Type::int_list || d.type == Type::float_list;
    return fmt::format("{}{} in {}", what, is_list ? " with every element" : "", range);
}

bool in_range(const Declaration& d, double x) {
    return (!d.min || x >= *d.min) && (!d.max || x <= *d.max);
}

}  // namespace

// ---- Declaration ------------------------------------------------------------------------------

Declaration Declaration::boolean(std::string key, bool def, std::string doc) {
    return {std::move(key), Type::boolean, def, std::move(doc), {}, {}, {}, {}, {}};
}
Declaration Declaration::integer(std::string key, int64_t def, std::string doc) {
    return {std::move(key), Type::integer, def, std::move(doc), {}, {}, {}, {}, {}};
}
Declaration Declaration::real(std::string key, double def, std::string doc) {
    return {std::move(key), Type::real, def, std::move(doc), {}, {}, {}, {}, {}};
}
Declaration Declaration::string(std::string key, std::string def, std::string doc) {
    return {std::move(key), Type::string, std::move(def), std::move(doc), {}, {}, {}, {}, {}};
}
Declaration Declaration::enumeration(std::string key, std::string def,
                                     std::vector<std::string> choices, std::string doc) {
    return {std::move(key),
            Type::enumeration,
            std::move(def),
            std::move(doc),
            {},
            {},
            std::move(choices),
            {},
            {}};
}
Declaration Declaration::int_list(std::string key, std::vector<int64_t> def, std::string doc) {
    return {std::move(key), Type::int_list, std::move(def), std::move(doc), {}, {}, {}, {}, {}};
}
Declaration Declaration::float_list(std::string key, std::vector<double> def, std::string doc) {
    return {std::move(key), Type::float_list, std::move(def), std::move(doc), {}, {}, {}, {}, {}};
}
Declaration Declaration::string_list(std::string key, std::vector<std::string> def,
                                     std::string doc) {
    return {std::move(key), Type::string_list, std::move(def), std::move(doc), {}, {}, {}, {}, {}};
}

Declaration& Declaration::range(std::optional<double> lo, std::optional<double> hi) {
    min = lo;
    max = hi;
    return *this;
}

Declaration& Declaration::read_by(std::string who) {
    readers = std::move(who);
    return *this;
}

Declaration& Declaration::also_from_env(std::vector<std::string> names) {
    env_aliases = std::move(names);
    return *this;
}

std::string Declaration::env_name() const {
    return env_name_for(key);
}

std::string Declaration::constraint_text() const {
    if (type == Type::enumeration) return fmt::format("{}", fmt::join(choices, "|"));
    if (!min && !max) return "";
    return fmt::format("{}{}, {}{}", min ? "[" : "(", min ? number_text(*min) : "...",
                       max ? number_text(*max) : "...", max ? "]" : ")");
}

std::string env_name_for(std::string_view key) {
    std::string env = "DFLASH_";
    for (const char c : key) {
        if (c == '.' || c == '-') {
            env += '_';
        } else if (c >= 'a' && c <= 'z') {
            env += static_cast<char>(c - 'a' + 'A');
        } else {
            env += c;
        }
    }
    return env;
}

size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diag = row[0];  // row[i-1][j-1]
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1] ? 1 : 0)});
            diag = up;
        }
    }
    return row[b.size()];
}

// ---- Registry ---------------------------------------------------------------------------------

Registry& Registry::add(Declaration decl) {
    DF_ASSERT(valid_key(decl.key), "setting key `{}` is not a dotted lower-case path", decl.key);
    DF_ASSERT(!find(decl.key), "setting `{}` is declared twice", decl.key);
    DF_ASSERT(!find_by_env(decl.env_name()), "settings `{}` and `{}` share the env name {}",
              decl.key, find_by_env(decl.env_name())->key, decl.env_name());
    DF_ASSERT(decl.default_value.index() == storage_index(decl.type),
              "default of `{}` does not have type {}", decl.key, type_name(decl.type));
    DF_ASSERT(decl.type != Type::enumeration || !decl.choices.empty(), "enum `{}` has no choices",
              decl.key);
    check(decl, decl.default_value, "its declaration");
    decls_.push_back(std::move(decl));
    std::sort(decls_.begin(), decls_.end(),
              [](const Declaration& a, const Declaration& b) { return a.key < b.key; });
    reindex();
    return *this;
}

void Registry::reindex() {
    by_key_.clear();
    by_env_.clear();
    for (size_t i = 0; i < decls_.size(); ++i) {
        by_key_.emplace(decls_[i].key, i);
        by_env_.emplace(decls_[i].env_name(), i);
    }
}

const Declaration* Registry::find(std::string_view key) const {
    const auto it = by_key_.find(key);
    return it == by_key_.end() ? nullptr : &decls_[it->second];
}

size_t Registry::index_of(std::string_view key, std::string_view where) const {
    const auto it = by_key_.find(key);
    if (it == by_key_.end()) fail_unknown(key, where);
    return it->second;
}

const Declaration* Registry::find_by_env(std::string_view env_var) const {
    const auto it = by_env_.find(env_var);
    return it == by_env_.end() ? nullptr : &decls_[it->second];
}

bool Registry::is_namespace(std::string_view path) const {
    const std::string prefix = std::string(path) + ".";
    const auto it = by_key_.lower_bound(prefix);
    return it != by_key_.end() && it->first.starts_with(prefix);
}

std::optional<std::string> Registry::nearest_key(std::string_view key) const {
    const Declaration* best = nullptr;
    size_t best_d = 0;
    for (const auto& d : decls_) {
        const size_t dist = edit_distance(key, d.key);
        if (!best || dist < best_d) {
            best = &d;
            best_d = dist;
        }
    }
    // A suggestion further than half the key away is noise, not a misspelling.
    if (!best || best_d > std::max<size_t>(2, key.size() / 2)) return std::nullopt;
    return best->key;
}

void Registry::fail_unknown(std::string_view key, std::string_view where) const {
    const auto near = nearest_key(key);
    DF_FAIL("unknown setting `{}` (from {}).{} `dflash config list` shows every setting", key,
            where, near ? fmt::format(" Did you mean `{}`?", *near) : std::string());
}

void Registry::check(const Declaration& d, const Value& value, std::string_view where) const {
    DF_CHECK(value.index() == storage_index(d.type), "setting `{}` = {} (from {}): expected {}",
             d.key, toml_literal(value), where, expectation(d));
    const auto fail = [&] {
        DF_FAIL("setting `{}` = {} (from {}) is out of range: expected {}", d.key,
                toml_literal(value), where, expectation(d));
    };
    switch (d.type) {
        case Type::integer:
            if (!in_range(d, static_cast<double>(std::get<int64_t>(value)))) fail();
            break;
        case Type::real:
            if (!std::isfinite(std::get<double>(value)) || !in_range(d, std::get<double>(value)))
                fail();
            break;
        case Type::int_list:
            for (const int64_t x : std::get<std::vector<int64_t>>(value))
                if (!in_range(d, static_cast<double>(x))) fail();
            break;
        case Type::float_list:
            for (const double x : std::get<std::vector<double>>(value))
                if (!std::isfinite(x) || !in_range(d, x)) fail();
            break;
        case Type::enumeration: {
            const auto& s = std::get<std::string>(value);
            DF_CHECK(std::find(d.choices.begin(), d.choices.end(), s) != d.choices.end(),
                     "setting `{}` = \"{}\" (from {}) is not a choice: expected {}", d.key, s,
                     where, expectation(d));
            break;
        }
        default:
            break;
    }
}

Value Registry::parse_text(const Declaration& d, std::string_view text,
                           std::string_view where) const {
    const auto bad = [&] {
        DF_FAIL("setting `{}` = `{}` (from {}): expected {}", d.key, text, where, expectation(d));
    };
    Value value;
    switch (d.type) {
        case Type::boolean: {
            bool b = false;
            if (!parse_bool_text(text, b)) bad();
            value = b;
            break;
        }
        case Type::integer: {
            int64_t i = 0;
            if (!parse_int_text(text, i)) bad();
            value = i;
            break;
        }
        case Type::real: {
            double x = 0;
            if (!parse_float_text(text, x)) bad();
            value = x;
            break;
        }
        case Type::string:
        case Type::enumeration:
            value = std::string(text);
            break;
        case Type::int_list: {
            std::vector<int64_t> v;
            for (const auto& item : split_list_text(text))
                if (!parse_int_text(item, v.emplace_back())) bad();
            value = std::move(v);
            break;
        }
        case Type::float_list: {
            std::vector<double> v;
            for (const auto& item : split_list_text(text))
                if (!parse_float_text(item, v.emplace_back())) bad();
            value = std::move(v);
            break;
        }
        case Type::string_list:
            value = split_list_text(text);
            break;
    }
    check(d, value, where);
    return value;
}

}  // namespace dflash::config
