// preload/stats/backtrace.cpp — backtraces of contended call sites through
// libunwind (LOCKSWAP_STATS_BACKTRACE), loaded with dlopen(RTLD_LOCAL).
//
// Why dlopen and not a link: preload/CMakeLists.txt. Built without libunwind's
// header (LOCKSWAP_LIBUNWIND_SONAME undefined) there are no backtraces and
// these functions say so.
#include "preload/stats/backtrace.h"

#include <dlfcn.h>

#include <atomic>

#include "preload/config/config.h"
#include "preload/diag.h"

#ifdef LOCKSWAP_LIBUNWIND_SONAME
#define UNW_LOCAL_ONLY
#include <libunwind.h>  // types and names only: the library is dlopen()ed
#endif

namespace lockswap::stats {

#ifdef LOCKSWAP_LIBUNWIND_SONAME
namespace {

// libunwind's local unwinding calls, from load_unwinder(); null: no
// backtraces. Not unw_backtrace(): its per-thread trace cache lives in TLS
// of a dlopen()ed library, which glibc allocates with malloc in each thread
// on first use — on a lock path.
struct Unwinder {
  decltype(&unw_tdep_getcontext) getcontext;
  decltype(&unw_init_local) init_local;
  decltype(&unw_step) step;
  decltype(&unw_get_reg) get_reg;
};
Unwinder g_unwinder_fns;
std::atomic<const Unwinder*> g_unwinder{nullptr};

}  // namespace

bool have_unwinder() { return g_unwinder.load(std::memory_order_acquire) != nullptr; }

int unwind_frames(uintptr_t* frames, int max) {
  const Unwinder* loaded = g_unwinder.load(std::memory_order_acquire);
  if (loaded == nullptr) return 0;
  const Unwinder& u = *loaded;
  unw_context_t context;
  unw_cursor_t cursor;
  if (u.getcontext(&context) != 0 || u.init_local(&cursor, &context) != 0) return 0;
  if (u.step(&cursor) <= 0) return 0;  // this function's own frame
  int n = 0;
  do {
    unw_word_t ip;
    if (u.get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0) break;
    frames[n++] = ip;
  } while (n < max && u.step(&cursor) > 0);
  return n;
}

#else
bool have_unwinder() { return false; }
int unwind_frames(uintptr_t*, int) { return 0; }
#endif

void load_unwinder() {
#ifdef LOCKSWAP_LIBUNWIND_SONAME
#define LOCKSWAP_NAME_OF(fn) LOCKSWAP_NAME_OF2(fn)  // the macro's expansion: _ULx86_64_step, ...
#define LOCKSWAP_NAME_OF2(fn) #fn
  if (!g_config.profile || g_config.stats_backtrace == 0 || have_unwinder()) return;
  void* lib = dlopen(LOCKSWAP_LIBUNWIND_SONAME, RTLD_NOW | RTLD_LOCAL);
  Unwinder& u = g_unwinder_fns;
  if (lib != nullptr) {
    u.getcontext = reinterpret_cast<decltype(u.getcontext)>(dlsym(lib, LOCKSWAP_NAME_OF(unw_tdep_getcontext)));
    u.init_local = reinterpret_cast<decltype(u.init_local)>(dlsym(lib, LOCKSWAP_NAME_OF(unw_init_local)));
    u.step = reinterpret_cast<decltype(u.step)>(dlsym(lib, LOCKSWAP_NAME_OF(unw_step)));
    u.get_reg = reinterpret_cast<decltype(u.get_reg)>(dlsym(lib, LOCKSWAP_NAME_OF(unw_get_reg)));
  }
  if (lib == nullptr || !u.getcontext || !u.init_local || !u.step || !u.get_reg) {
    diag("lockswap: cannot load " LOCKSWAP_LIBUNWIND_SONAME "; statistics without backtraces\n");
    return;
  }
  g_unwinder.store(&u, std::memory_order_release);
#undef LOCKSWAP_NAME_OF
#undef LOCKSWAP_NAME_OF2
#endif
}

}  // namespace lockswap::stats
