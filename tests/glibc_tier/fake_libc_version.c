/* tests/glibc_tier/fake_libc_version.c — stands in for glibc's
 * gnu_get_libc_version() when preloaded in front of liblockswap.so, so that
 * refuse_unchecked.sh can show what lockswap does on a glibc it was not
 * checked against. The version is FAKE_GLIBC_VERSION. */
#include <gnu/libc-version.h>
#include <stdlib.h>

const char* gnu_get_libc_version(void) {
  const char* v = getenv("FAKE_GLIBC_VERSION");
  return v ? v : "2.99";
}
