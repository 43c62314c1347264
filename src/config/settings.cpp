// The settings snapshot (see settings.h). Tested by tests/config/settings_test.cpp.
#include "config/settings.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/hash.h"

namespace dflash::config {
namespace {

template <class T>
constexpr std::string_view cpp_type_name() {
    if constexpr (std::is_same_v<T, bool>) return "bool";
    if constexpr (std::is_same_v<T, int64_t>) return "int64_t";
    if constexpr (std::is_same_v<T, double>) return "double";
    if constexpr (std::is_same_v<T, std::string>) return "std::string";
    if constexpr (std::is_same_v<T, std::vector<int64_t>>) return "std::vector<int64_t>";
    if constexpr (std::is_same_v<T, std::vector<double>>) return "std::vector<double>";
    if constexpr (std::is_same_v<T, std::vector<std::string>>) return "std::vector<std::string>";
}

// The C++ type a setting type is read with, for the wrong-T message.
std::string_view cpp_type_for(Type t) {
    switch (storage_index(t)) {
        case 0:
            return cpp_type_name<bool>();
        case 1:
            return cpp_type_name<int64_t>();
        case 2:
            return cpp_type_name<double>();
        case 3:
            return cpp_type_name<std::string>();
        case 4:
            return cpp_type_name<std::vector<int64_t>>();
        case 5:
            return cpp_type_name<std::vector<double>>();
        default:
            return cpp_type_name<std::vector<std::string>>();
    }
}

}  // namespace

Settings::Settings(std::shared_ptr<const Registry> registry) : registry_(std::move(registry)) {
    DF_ASSERT(registry_ != nullptr);
    entries_.reserve(registry_->size());
    for (const auto& d : registry_->all()) entries_.push_back({d.default_value, "default"});
}

Settings Settings::with(const std::vector<Assignment>& assignments) const {
    Settings out = *this;
    for (const auto& a : assignments) {
        const size_t i = registry_->index_of(a.key, a.source);
        registry_->check(registry_->all()[i], a.value, a.source);
        out.entries_[i] = {a.value, a.source};
    }
    return out;
}

Settings Settings::with_overrides(
    const std::vector<std::pair<std::string, std::string>>& kv) const {
    std::vector<Assignment> assignments;
    for (const auto& [key, text] : kv) {
        const auto& decl = registry_->all()[registry_->index_of(key, "override")];
        assignments.push_back({key, registry_->parse_text(decl, text, "override"), "override"});
    }
    return with(assignments);
}

const Settings::Entry& Settings::entry(std::string_view key) const {
    return entries_[registry_->index_of(key, "a Settings lookup")];
}

template <class T>
T Settings::get(std::string_view key) const {
    const Entry& e = entry(key);
    const T* v = std::get_if<T>(&e.value);
    if (!v) {
        const auto& d = registry_->all()[registry_->index_of(key, "a Settings lookup")];
        DF_FAIL("setting `{}` has type {}: read it with get<{}>(), not get<{}>()", key,
                type_name(d.type), cpp_type_for(d.type), cpp_type_name<T>());
    }
    return *v;
}

template bool Settings::get<bool>(std::string_view) const;
template int64_t Settings::get<int64_t>(std::string_view) const;
template double Settings::get<double>(std::string_view) const;
template std::string Settings::get<std::string>(std::string_view) const;
template std::vector<int64_t> Settings::get<std::vector<int64_t>>(std::string_view) const;
template std::vector<double> Settings::get<std::vector<double>>(std::string_view) const;
template std::vector<std::string> Settings::get<std::vector<std::string>>(std::string_view) const;

const Value& Settings::value(std::string_view key) const {
    return entry(key).value;
}

const std::string& Settings::source(std::string_view key) const {
    return entry(key).source;
}

bool Settings::is_default(std::string_view key) const {
    const size_t i = registry_->index_of(key, "a Settings lookup");
    return entries_[i].value == registry_->all()[i].default_value;
}

std::string Settings::canonical_text() const {
    std::string text;
    const auto& decls = registry_->all();  // sorted by key
    for (size_t i = 0; i < decls.size(); ++i) {
        text += fmt::format("{} = {}\n", decls[i].key, toml_literal(entries_[i].value));
    }
    return text;
}

std::string Settings::hash() const {
    return fmt::format("{:016x}", fnv1a64(canonical_text()));
}

}  // namespace dflash::config
