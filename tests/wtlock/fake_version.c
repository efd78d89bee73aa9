/* tests/wtlock/fake_version.c — a library that answers wiredtiger_version()
 * with a version lockswap has not checked (3.3.0). Loaded after
 * liblockswap.so and ahead of libwiredtiger.so, its definition is the one
 * dlsym(RTLD_DEFAULT) finds: the honest way to show lockswap a WiredTiger of
 * another version while the real 3.2 library still does the work. */
#include <stddef.h>

const char* wiredtiger_version(int* major, int* minor, int* patch) {
  if (major != NULL) *major = 3;
  if (minor != NULL) *minor = 3;
  if (patch != NULL) *patch = 0;
  return "WiredTiger 3.3.0 (lockswap test stand-in)";
}
