// preload/exports.cpp — the exported symbols: one forwarder per interposed
// function, each a tail jump through the table (preload/ops.h), glibc's C11
// functions over them, glibc's old aliases, and pthread_setcanceltype.
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <threads.h>
#include <unistd.h>

#include <atomic>

#include "core/cancel.h"
#include "preload/ops.h"
#include "preload/real.h"
#include "preload/stats/waits.h"

#define LOCKSWAP_EXPORT extern "C" __attribute__((visibility("default")))

namespace lockswap {
namespace {

// C11's result codes from glibc's error numbers.
int thrd_result(int err) {
  switch (err) {
    case 0: return thrd_success;
    case EBUSY: return thrd_busy;
    case ETIMEDOUT: return thrd_timedout;
    case ENOMEM: return thrd_nomem;
    default: return thrd_error;
  }
}

// glibc's pthread_setcanceltype, plus the mirror of the type that lets a
// blocking call of a native variant know in one TLS load whether its caller
// may be cancelled asynchronously (core/cancel.h). lockswap's own type
// switches come through here too, so the mirror is the thread's real type.
using SetCanceltypeFn = int (*)(int, int*);
std::atomic<SetCanceltypeFn> g_real_setcanceltype{nullptr};

__attribute__((noinline)) SetCanceltypeFn resolve_setcanceltype() {
  auto fn = reinterpret_cast<SetCanceltypeFn>(dlsym(RTLD_NEXT, "pthread_setcanceltype"));
  if (fn == nullptr) {
    static const char msg[] = "lockswap: cannot find glibc's pthread_setcanceltype\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(2);
  }
  g_real_setcanceltype.store(fn, std::memory_order_relaxed);
  return fn;
}
// Resolved before main (and lazily by an earlier caller).
__attribute__((constructor)) void resolve_setcanceltype_early() {
  if (g_real_setcanceltype.load(std::memory_order_relaxed) == nullptr) resolve_setcanceltype();
}
}  // namespace
}  // namespace lockswap

using namespace lockswap;

// Not noexcept (glibc's is not either): enabling the asynchronous type acts
// on a pending cancellation, which unwinds out of this call.
LOCKSWAP_EXPORT int pthread_setcanceltype(int type, int* oldtype) {
  SetCanceltypeFn fn = g_real_setcanceltype.load(std::memory_order_relaxed);
  if (__builtin_expect(fn == nullptr, 0)) fn = resolve_setcanceltype();
  int rc = fn(type, oldtype);
  if (rc == 0) cancel::t_async_type = type == PTHREAD_CANCEL_ASYNCHRONOUS;
  return rc;
}

// One forwarder per interposed function, generated from the list
// (preload/real.h): a tail jump through the table. Not declared noexcept
// although nothing the non-sleeping calls reach throws: a noexcept function
// may not tail-call a pointer that is not noexcept itself (the call needs a
// terminate region), so each forwarder would keep a frame and a call (more
// instructions on every unlock and try); without it each is one indirect
// jump. The calls that may sleep must not be noexcept anyway: a cancellation
// unwinds through them — deferred at the cancellation points (cond and
// semaphore waits), and asynchronous from any sleep when the caller enabled
// that (glibc's locks let such a thread be cancelled where it waits; the
// native entry points run such a caller's acquisition deferred with only the
// futex sleep asynchronous, core/cancel.h, and the variants' unwind guards
// leave the lock consistent).
#define X(name, ret, params, args, sleeps, family) \
  LOCKSWAP_EXPORT ret name params { return g_ops.name args; }
LOCKSWAP_REAL_FUNCTIONS(X)
#undef X

// glibc's C11 functions call internal aliases that bypass the symbols above,
// so they are interposed too, with glibc's mapping of error codes.
LOCKSWAP_EXPORT int mtx_init(mtx_t* mtx, int type) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  // glibc 2.36: the two recursive combinations make a recursive mutex; every
  // other value, including ones C11 does not define, makes a plain one.
  if (type == (mtx_plain | mtx_recursive) || type == (mtx_timed | mtx_recursive))
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  return thrd_result(pthread_mutex_init(reinterpret_cast<pthread_mutex_t*>(mtx), &attr));
}
LOCKSWAP_EXPORT int mtx_lock(mtx_t* mtx) { return thrd_result(pthread_mutex_lock(reinterpret_cast<pthread_mutex_t*>(mtx))); }
LOCKSWAP_EXPORT int mtx_trylock(mtx_t* mtx) {
  return thrd_result(pthread_mutex_trylock(reinterpret_cast<pthread_mutex_t*>(mtx)));
}
LOCKSWAP_EXPORT int mtx_timedlock(mtx_t* __restrict mtx, const timespec* __restrict abs) {
  return thrd_result(pthread_mutex_timedlock(reinterpret_cast<pthread_mutex_t*>(mtx), abs));
}
LOCKSWAP_EXPORT int mtx_unlock(mtx_t* mtx) {
  return thrd_result(pthread_mutex_unlock(reinterpret_cast<pthread_mutex_t*>(mtx)));
}
LOCKSWAP_EXPORT void mtx_destroy(mtx_t* mtx) { pthread_mutex_destroy(reinterpret_cast<pthread_mutex_t*>(mtx)); }

LOCKSWAP_EXPORT int cnd_init(cnd_t* c) { return thrd_result(pthread_cond_init(reinterpret_cast<pthread_cond_t*>(c), nullptr)); }
LOCKSWAP_EXPORT int cnd_signal(cnd_t* c) { return thrd_result(pthread_cond_signal(reinterpret_cast<pthread_cond_t*>(c))); }
LOCKSWAP_EXPORT int cnd_broadcast(cnd_t* c) {
  return thrd_result(pthread_cond_broadcast(reinterpret_cast<pthread_cond_t*>(c)));
}
// With statistics on, the wait table (preload/stats/waits.h) records a condition
// wait at the program's call site: these two are that site for their
// pthread_cond_* call, which comes from inside liblockswap.
namespace {
struct C11Caller {
  explicit C11Caller(void* ra) {
    if (waits::on()) waits::t_c11_caller = reinterpret_cast<uintptr_t>(ra);
  }
  ~C11Caller() { waits::t_c11_caller = 0; }
};
}  // namespace
LOCKSWAP_EXPORT int cnd_wait(cnd_t* c, mtx_t* mtx) {
  C11Caller site(__builtin_return_address(0));
  return thrd_result(pthread_cond_wait(reinterpret_cast<pthread_cond_t*>(c), reinterpret_cast<pthread_mutex_t*>(mtx)));
}
LOCKSWAP_EXPORT int cnd_timedwait(cnd_t* __restrict c, mtx_t* __restrict mtx, const timespec* __restrict abs) {
  C11Caller site(__builtin_return_address(0));
  return thrd_result(pthread_cond_timedwait(reinterpret_cast<pthread_cond_t*>(c),
                                            reinterpret_cast<pthread_mutex_t*>(mtx), abs));
}
LOCKSWAP_EXPORT void cnd_destroy(cnd_t* c) { pthread_cond_destroy(reinterpret_cast<pthread_cond_t*>(c)); }

// glibc's old public aliases (GLIBC_2.2.5 compatibility symbols). A binary
// that calls them must reach lockswap too, or two implementations would share
// one lock word.
// copy(): the alias carries the target's declared attributes (glibc's
// headers say nothrow), as gcc's -Wmissing-attributes asks. clang has no
// copy attribute (and no such warning).
#if __has_attribute(copy)
#define LOCKSWAP_ALIAS_ATTRIBUTES(target) alias(#target), copy(target)
#else
#define LOCKSWAP_ALIAS_ATTRIBUTES(target) alias(#target)
#endif
#define LOCKSWAP_ALIAS(old_name, target) \
  LOCKSWAP_EXPORT __typeof__(target) old_name __attribute__((LOCKSWAP_ALIAS_ATTRIBUTES(target)));
LOCKSWAP_ALIAS(__pthread_mutex_init, pthread_mutex_init)
LOCKSWAP_ALIAS(__pthread_mutex_destroy, pthread_mutex_destroy)
LOCKSWAP_ALIAS(__pthread_mutex_lock, pthread_mutex_lock)
LOCKSWAP_ALIAS(__pthread_mutex_trylock, pthread_mutex_trylock)
LOCKSWAP_ALIAS(__pthread_mutex_unlock, pthread_mutex_unlock)
LOCKSWAP_ALIAS(__pthread_rwlock_init, pthread_rwlock_init)
LOCKSWAP_ALIAS(__pthread_rwlock_destroy, pthread_rwlock_destroy)
LOCKSWAP_ALIAS(__pthread_rwlock_rdlock, pthread_rwlock_rdlock)
LOCKSWAP_ALIAS(__pthread_rwlock_tryrdlock, pthread_rwlock_tryrdlock)
LOCKSWAP_ALIAS(__pthread_rwlock_wrlock, pthread_rwlock_wrlock)
LOCKSWAP_ALIAS(__pthread_rwlock_trywrlock, pthread_rwlock_trywrlock)
LOCKSWAP_ALIAS(__pthread_rwlock_unlock, pthread_rwlock_unlock)
