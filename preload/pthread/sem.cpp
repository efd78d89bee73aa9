// preload/pthread/sem.cpp — sem_* for every variant: glibc's checks and cancellation
// points around the adapter's semaphore word (preload/pthread/families.h).
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>

#include <atomic>

#include "core/sem.h"
#include "core/wait_ctx.h"
#include "preload/abi.h"
#include "preload/pthread/entry.h"
#include "preload/pthread/families.h"
#include "preload/real.h"
#include "preload/pthread/adapters.h"

namespace lockswap {
namespace {

// sem_* report failure as -1 with errno (out of line: setting errno is a
// call, which would give every fast path a stack frame).
__attribute__((noinline)) int sem_error(int err) {
  errno = err;
  return -1;
}
int sem_result(int err) { return __builtin_expect(err == 0, 1) ? 0 : sem_error(err); }

// glibc 2.36's order: argument checks, then (sem_wait and sem_timedwait
// only: cancellation points that "shall occur" even when a unit is available)
// a cancellation check, then the fast path, then the cancellable sleep.
// sem_clockwait acts on a pending cancellation only when it has to sleep.
template <class V>
struct NativeSem {
  using Sleeper = CancellableSleeper<SemPlainSleeper>;
  static int init(sem_t* s, int pshared, unsigned value) {
    if (value > SEM_VALUE_MAX) return sem_result(EINVAL);
    V::init(s, value, pshared != 0);
    return 0;
  }
  static int destroy(sem_t*) { return 0; }  // glibc checks nothing either
  // glibc's pthread_testcancel() only where a request could act
  // (abi::cancel_may_act(): its own test, inline), so the fast path makes no
  // call and keeps no frame.
  static int wait(sem_t* s) {
    if (__builtin_expect(abi::cancel_may_act(), 0)) return act_on_cancel_then_wait(s);
    if (__builtin_expect(V::trywait(s) == 0, 1)) return 0;
    return wait_slow(s);
  }
  static int trywait(sem_t* s) { return sem_result(V::trywait(s)); }
  static int timedwait(sem_t* s, const timespec* abs) {
    if (!valid_nsec(abs)) return sem_result(EINVAL);
    if (abi::cancel_may_act()) pthread_testcancel();
    return take(s, WaitCtx::until(CLOCK_REALTIME, abs, WaitFamily::sem));
  }
  static int clockwait(sem_t* s, clockid_t clock, const timespec* abs) {
    if (!supported_clock(clock) || !valid_nsec(abs)) return sem_result(EINVAL);
    return take(s, WaitCtx::until(clock, abs, WaitFamily::sem));
  }
  // A unit at once, or the wait with deferred cancellation around it.
  static int take(sem_t* s, WaitCtx ctx) {
    if (__builtin_expect(V::trywait(s) == 0, 1)) return 0;
    return sleep_for_unit(s, ctx);
  }
  // Out of line, so that sem_wait's fast path builds no WaitCtx and keeps no frame.
  __attribute__((noinline)) static int wait_slow(sem_t* s) { return sleep_for_unit(s, WaitCtx::blocking(WaitFamily::sem)); }
  __attribute__((noinline)) static int act_on_cancel_then_wait(sem_t* s) {
    pthread_testcancel();
    return take(s, WaitCtx::blocking(WaitFamily::sem));
  }
  // Only a caller of the asynchronous type needs the wait switched to
  // deferred around it (preload/pthread/entry.h, with_deferred_cancellation):
  // cancel::async_caller() reads the mirror of the thread's type that
  // preload's pthread_setcanceltype keeps, as the mutex and rwlock entries
  // do. For a deferred caller the switch would be a call into glibc that
  // changes nothing, about 100 instructions on every sleep
  // (docs/measurements.md, "The futex semaphore's sleeping round trip");
  // its futex sleep is still the cancellation point (Sleeper).
  __attribute__((noinline)) static int sleep_for_unit(sem_t* s, WaitCtx ctx) {
    if (__builtin_expect(!cancel::async_caller(), 1)) return sem_result(V::template wait<Sleeper>(s, ctx));
    return sem_result(with_deferred_cancellation([&] { return V::template wait<Sleeper>(s, ctx); }));
  }
  // The core's slow paths turn their error code into sem_post's result
  // themselves, so the fast path's calls are tail calls and it keeps no frame.
  struct PostResult {
    static int of(int err) { return sem_result(err); }
  };
  static int post(sem_t* s) { return V::template post<PostResult>(s); }
  static int getvalue(sem_t* s, int* value) {
    *value = V::value(s);
    return 0;
  }
};

void install_glibc_sem(OpsTable& t, const OpsTable& g) {
  for_each_function<ApiFamily::sem, true>([&]<auto Slot>() { t.*Slot = g.*Slot; });
}

template <class V>
void install_sem(OpsTable& t) {
  if constexpr (V::forwards_to_glibc) {
    install_glibc_sem(t, real::glibc());
  } else {
    using S = NativeSem<V>;
    t.sem_init = S::init;
    t.sem_destroy = S::destroy;
    t.sem_wait = S::wait;
    t.sem_trywait = S::trywait;
    t.sem_timedwait = S::timedwait;
    t.sem_clockwait = S::clockwait;
    t.sem_post = S::post;
    t.sem_getvalue = S::getvalue;
  }
}
}  // namespace

void install_sem_family(OpsTable& t, SemVariant v) {
  switch (v) {
#define X(id, name, type, desc) \
  case SemVariant::id:          \
    install_sem<type>(t);       \
    break;
    LOCKSWAP_SEM_VARIANTS(X)
#undef X
    default:
      break;
  }
}

}  // namespace lockswap
