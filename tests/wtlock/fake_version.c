/* tests/wtlock/fake_version.c — a library that answers wiredtiger_version()
 * with a version lockswap has not checked (3.3.0). Loaded after
 * liblockswap.so and ahead of libwiredtiger.so, its definition is the one
 * dlsym(RTLD_DEFAULT) finds: the honest way to show lockswap a WiredTiger of
 * another version while the real 3.2 library still does the work.
 * Built with FAKE_DIAGNOSTIC it instead adds what a diagnostic build of 3.2
 * has and a release build lacks: __wt_rwlock_islocked. */
#include <stdbool.h>
#include <stddef.h>

#ifdef FAKE_DIAGNOSTIC
bool __wt_rwlock_islocked(void* session, void* lock) {
  (void)session;
  (void)lock;
  return false;
}
#else

const char* wiredtiger_version(int* major, int* minor, int* patch) {
  if (major != NULL) *major = 3;
  if (minor != NULL) *minor = 3;
  if (patch != NULL) *patch = 0;
  return "WiredTiger 3.3.0 (lockswap test stand-in)";
}
#endif
