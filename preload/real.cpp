#include "preload/real.h"

#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

namespace lockswap::real {

OpsTable g_functions;
bool g_resolved;

namespace {
// The condvar functions that exist at both GLIBC_2.2.5 (old ABI) and
// GLIBC_2.3.2; pthread_cond_clockwait only ever had the new ABI. A failed
// dlvsym must be avoided: reporting it allocates, and the allocator (jemalloc)
// may take a lock that brings it straight back here.
bool has_two_cond_abis(const char* name) {
  return strncmp(name, "pthread_cond_", 13) == 0 && strcmp(name, "pthread_cond_clockwait") != 0;
}

void* lookup(const char* name) {
  void* fn = nullptr;
#if defined(__x86_64__)
  if (has_two_cond_abis(name)) fn = dlvsym(RTLD_NEXT, name, "GLIBC_2.3.2");
#endif
  if (fn == nullptr) fn = dlsym(RTLD_NEXT, name);
  if (fn == nullptr) {
    static const char msg[] = "lockswap: cannot find glibc's ";
    (void)!write(2, msg, sizeof msg - 1);
    (void)!write(2, name, strlen(name));
    (void)!write(2, "\n", 1);
    _exit(2);
  }
  return fn;
}
}  // namespace

const OpsTable& resolve_slow() {
  // Idempotent: racing threads store the same pointers.
#define X(name, ret, params, args, sleeps, family) g_functions.name = reinterpret_cast<ret(*) params>(lookup(#name));
  LOCKSWAP_REAL_FUNCTIONS(X)
#undef X
  __atomic_store_n(&g_resolved, true, __ATOMIC_RELEASE);
  return g_functions;
}

}  // namespace lockswap::real
