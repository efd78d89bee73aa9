// preload/config/escape.h — text from outside the library (the environment, a
// LOCKSWAP_SELECT rule) on lockswap's stderr.
//
// At most kUntrustedEchoMax bytes, every byte outside printable ASCII shown as
// '?', and the full length when cut. A value may hold terminal escape
// sequences (ESC, the C1 controls, their UTF-8 forms) or be megabytes long;
// neither may reach the terminal as such. No allocation: usable before main.
#pragma once
#include <cstddef>

#include "preload/diag.h"

namespace lockswap {

inline constexpr size_t kUntrustedEchoMax = 128;

inline void diag_untrusted(const char* s, size_t len) {
  char buf[kUntrustedEchoMax] = {};  // (initialised: GCC cannot see that only n bytes are read)
  size_t n = len < kUntrustedEchoMax ? len : kUntrustedEchoMax;
  for (size_t i = 0; i < n; ++i) buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
  diag(buf, n);
  if (n == len) return;
  char digits[24];
  size_t d = sizeof digits;
  for (size_t v = len; d == sizeof digits || v != 0; v /= 10) digits[--d] = static_cast<char>('0' + v % 10);
  diag("... (");
  diag(digits + d, sizeof digits - d);
  diag(" bytes)");
}

}  // namespace lockswap
