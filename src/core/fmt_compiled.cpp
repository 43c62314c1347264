// The compiled part of the {fmt} library, built once here instead of in every unit that formats a
// message. Debian ships {fmt} as headers and a shared library only, and the GPU machine lacks the
// shared library. Building fmt header-only (FMT_HEADER_ONLY) instead compiled and optimised fmt's
// whole implementation in every unit that includes core/error.h: two thirds of a small unit's
// build time, and most of its object code. So the other units see fmt's declarations alone, and
// this unit supplies the definitions: the functions format-inl.h defines, and the templates whose
// definitions live only there, instantiated for the types fmt's headers declare them for. A
// missing one fails the link of the dflash binary. Covered by tests/core/error_test.cpp and every
// test that checks an error message.
#include <fmt/format-inl.h>

#include <locale>

FMT_BEGIN_NAMESPACE
namespace detail {

template auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

template locale_ref::locale_ref(const std::locale& loc);
template auto locale_ref::get<std::locale>() const -> std::locale;

template auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template auto decimal_point_impl<char>(locale_ref) -> char;
template auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template auto decimal_point_impl<wchar_t>(locale_ref) -> wchar_t;

}  // namespace detail
FMT_END_NAMESPACE
