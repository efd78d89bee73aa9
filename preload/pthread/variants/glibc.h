// preload/pthread/variants/glibc.h — the control: every call goes to glibc untouched.
#pragma once

namespace lockswap {
// Marker type: the family entry files (preload/pthread/families.h) forward whole
// calls (object layout included) to real::glibc() when a variant's adapter is
// GlibcVariant.
struct GlibcVariant {
  static constexpr bool forwards_to_glibc = true;
};
}  // namespace lockswap
