// preload/dispatch.cpp — the one path from a pthread / C11 / semaphore call to a variant.
//
// Every exported function is one indirect jump through `g_ops`, a table with
// one pointer per interposed function, filled once from the registry when the
// configuration is read:
//   * variant `glibc`: the pointers are glibc's own functions, so the control
//     costs one extra jump and nothing else;
//   * native variants: the pointers are the templates below instantiated for
//     the variant's adapter. They reproduce glibc's argument checks and kind
//     semantics (recursive, errorcheck, adaptive, destroyed objects, EDEADLK,
//     EINVAL timing), delegate objects glibc must own (robust, PI, PP,
//     process-shared), and call the adapter's lock word operations with a
//     WaitCtx. The default-kind, uncontended path is a short leaf; kinds,
//     timeouts and errors live in noinline functions.
// Until the configuration is read, every pointer is a first-call stub that
// reads it and re-dispatches, so a lock taken by another library's
// constructor before ours works.
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <string.h>
#include <threads.h>
#include <unistd.h>

#include <atomic>

#include "core/cancel.h"
#include "core/cond.h"
#include "core/read_pref.h"
#include "core/sem.h"
#include "core/thread_registry.h"
#include "core/wait_ctx.h"
#include "preload/abi.h"
#include "preload/config.h"
#include "preload/real.h"
#include "preload/registry.h"
#include "preload/select.h"
#include "preload/stats.h"

#define LOCKSWAP_EXPORT extern "C" __attribute__((visibility("default")))
#define LOCKSWAP_LIKELY(x) __builtin_expect(!!(x), 1)
#define LOCKSWAP_INLINE __attribute__((always_inline)) inline

namespace lockswap {
namespace {

using abi::MutexObject;
using abi::RwlockObject;

// ---------------------------------------------------------------- timeouts

bool valid_nsec(const timespec* t) { return t->tv_nsec >= 0 && t->tv_nsec < 1'000'000'000; }
bool supported_clock(clockid_t c) { return c == CLOCK_REALTIME || c == CLOCK_MONOTONIC; }

// How an acquisition was asked for (lock, try, timed or clock flavour); also
// what a delegation to glibc replays.
struct Call {
  enum Op : uint8_t { block, trylock, timed, clocked } op;
  clockid_t clock;
  const timespec* abs;
  WaitCtx ctx() const {
    switch (op) {
      case trylock: return WaitCtx::try_once();
      case block: return WaitCtx::blocking();
      default: return WaitCtx::until(clock, abs);
    }
  }
};

// ------------------------------------------------------------------ mutex

// A native variant met an object glibc must own (robust, PI, PP, pshared):
// replay the call on glibc's implementation.
__attribute__((noinline)) int delegate_mutex(pthread_mutex_t* m, Call c) {
  lockevent_inc(LockEvent::delegated_to_glibc);
  const auto& g = real::glibc();
  switch (c.op) {
    case Call::block: return g.pthread_mutex_lock(m);
    case Call::trylock: return g.pthread_mutex_trylock(m);
    case Call::timed: return g.pthread_mutex_timedlock(m, c.abs);
    default: return g.pthread_mutex_clocklock(m, c.clock, c.abs);
  }
}

// A timed acquisition whose quiet attempt failed: glibc validates the
// timeout only now, when it would have to wait.
template <class V>
__attribute__((noinline)) int mutex_wait_timed(MutexObject& o, Call c, bool adaptive) {
  if (!valid_nsec(c.abs)) return EINVAL;
  return V::lock(o, c.ctx(), adaptive);
}

// One acquisition of the lock word. A blocking call goes straight to the
// variant (whose own fast path comes first); try is the variant's trylock;
// a timed call makes one quiet attempt before validating and waiting.
template <class V>
LOCKSWAP_INLINE int mutex_take(MutexObject& o, Call c, bool adaptive) {
  if (c.op == Call::block) return V::lock(o, WaitCtx::blocking(), adaptive);
  if (c.op == Call::trylock) return V::trylock(o) ? 0 : EBUSY;
  if (V::try_fast(o)) return 0;
  return mutex_wait_timed<V>(o, c, adaptive);
}

template <class V>
__attribute__((noinline)) int mutex_acquire_kinded(pthread_mutex_t* m, int kind, Call c) {
  MutexObject& o = abi::obj(m);
  if (kind == abi::kKindDestroyed) return EINVAL;
  if (abi::glibc_owned(kind)) return delegate_mutex(m, c);
  int type = kind & ~abi::kKindElisionBits;
  if (type < 0 || type > abi::kKindTypeMask) return EINVAL;
  if (type == abi::kKindNormal || type == abi::kKindAdaptive) return mutex_take<V>(o, c, type == abi::kKindAdaptive);
  int32_t self = current_tid();
  if (o.owner_tid.load(std::memory_order_relaxed) == self) {
    if (type == abi::kKindErrorcheck) return c.op == Call::trylock ? EBUSY : EDEADLK;
    if (o.recursion + 1 == 0) return EAGAIN;  // recursion counter would wrap
    ++o.recursion;
    return 0;
  }
  if (int rc = mutex_take<V>(o, c, false)) return rc;
  o.owner_tid.store(self, std::memory_order_relaxed);
  o.recursion = 1;
  return 0;
}

// kTagged: the instantiation LOCKSWAP_SELECT's mixed entries reach, for
// objects carrying a selection tag in __kind (abi.h), which it strips first.
template <class V, bool kTagged = false>
LOCKSWAP_INLINE int mutex_kind(const MutexObject& o) {
  int kind = o.kind.load(std::memory_order_relaxed);
  if constexpr (kTagged) kind = abi::without_tag(kind);
  return kind;
}

template <class V, bool kTagged = false>
LOCKSWAP_INLINE int mutex_acquire(pthread_mutex_t* m, Call c) {
  MutexObject& o = abi::obj(m);
  int kind = mutex_kind<V, kTagged>(o);
  if (LOCKSWAP_LIKELY(kind == abi::kKindNormal)) return mutex_take<V>(o, c, false);
  return mutex_acquire_kinded<V>(m, kind, c);
}

// glibc counts a mutex's users (__nusers: +1 per lock, -1 per unlock, checked
// by destroy) and its unlock of the kinds without an owner check releases
// whatever is there. So an unlock of an unlocked normal or adaptive mutex
// returns 0 and leaves the count one short for good: destroy says EBUSY until
// the mutex is initialised again. The other kinds never get there (EPERM).
// Those kinds leave `recursion` unused, so it keeps that shortfall (as a count
// of stray unlocks), at the offset where glibc keeps __nusers.
__attribute__((noinline)) void note_stray_unlock(MutexObject& o) { ++o.recursion; }

// Releases the lock word of an owner-less kind.
template <class V>
LOCKSWAP_INLINE void release_word(MutexObject& o) {
  if (!V::unlock(o)) note_stray_unlock(o);
}

template <class V>
__attribute__((noinline)) int mutex_release_kinded(pthread_mutex_t* m, int kind) {
  MutexObject& o = abi::obj(m);
  if (kind == abi::kKindDestroyed) return EINVAL;
  if (abi::glibc_owned(kind)) return real::glibc().pthread_mutex_unlock(m);
  int type = kind & ~abi::kKindElisionBits;
  if (type < 0 || type > abi::kKindTypeMask) return EINVAL;
  if (type == abi::kKindRecursive || type == abi::kKindErrorcheck) {
    if (o.owner_tid.load(std::memory_order_relaxed) != current_tid()) return EPERM;
    if (--o.recursion != 0) return 0;
    o.owner_tid.store(0, std::memory_order_relaxed);
    V::unlock(o);
    return 0;
  }
  release_word<V>(o);
  return 0;
}

template <class V, bool kTagged = false>
LOCKSWAP_INLINE int mutex_release(pthread_mutex_t* m) {
  MutexObject& o = abi::obj(m);
  int kind = mutex_kind<V, kTagged>(o);
  if (LOCKSWAP_LIKELY(kind == abi::kKindNormal)) {
    release_word<V>(o);
    return 0;
  }
  return mutex_release_kinded<V>(m, kind);
}

template <class V>
int mutex_destroy(pthread_mutex_t* m) {
  MutexObject& o = abi::obj(m);
  int kind = o.kind.load(std::memory_order_relaxed);
  if (kind == abi::kKindDestroyed) return 0;
  if (abi::glibc_owned(kind)) return real::glibc().pthread_mutex_destroy(m);
  // Locked, or (normal and adaptive kinds) the user count glibc would keep is
  // off by the stray unlocks (note_stray_unlock): EBUSY, as glibc says.
  if (V::is_locked(o) || o.recursion != 0) return EBUSY;
  o.kind.store(abi::kKindDestroyed, std::memory_order_relaxed);
  return 0;
}

// Kinds come from glibc's attribute object; only objects glibc must own are
// initialised by glibc (so their layout is glibc's).
int mutex_init_native(pthread_mutex_t* m, const pthread_mutexattr_t* attr) {
  int type = PTHREAD_MUTEX_DEFAULT, robust = PTHREAD_MUTEX_STALLED, protocol = PTHREAD_PRIO_NONE,
      pshared = PTHREAD_PROCESS_PRIVATE;
  if (attr != nullptr) {
    pthread_mutexattr_gettype(attr, &type);
    pthread_mutexattr_getrobust(attr, &robust);
    pthread_mutexattr_getprotocol(attr, &protocol);
    pthread_mutexattr_getpshared(attr, &pshared);
  }
  if (robust != PTHREAD_MUTEX_STALLED || protocol != PTHREAD_PRIO_NONE || pshared != PTHREAD_PROCESS_PRIVATE)
    return real::glibc().pthread_mutex_init(m, attr);
  memset(static_cast<void*>(m), 0, sizeof *m);
  abi::obj(m).kind.store(type & abi::kKindTypeMask, std::memory_order_relaxed);
  return 0;
}


// ------------------------------------------------------------ dispatch table

// One pointer per interposed function (see the file comment).
extern OpsTable g_ops;

// ----------------------------------------------------------------- rwlock

__attribute__((noinline)) int delegate_rdlock(pthread_rwlock_t* l, Call c) {
  lockevent_inc(LockEvent::delegated_to_glibc);
  const auto& g = real::glibc();
  switch (c.op) {
    case Call::block: return g.pthread_rwlock_rdlock(l);
    case Call::trylock: return g.pthread_rwlock_tryrdlock(l);
    case Call::timed: return g.pthread_rwlock_timedrdlock(l, c.abs);
    default: return g.pthread_rwlock_clockrdlock(l, c.clock, c.abs);
  }
}

__attribute__((noinline)) int delegate_wrlock(pthread_rwlock_t* l, Call c) {
  lockevent_inc(LockEvent::delegated_to_glibc);
  const auto& g = real::glibc();
  switch (c.op) {
    case Call::block: return g.pthread_rwlock_wrlock(l);
    case Call::trylock: return g.pthread_rwlock_trywrlock(l);
    case Call::timed: return g.pthread_rwlock_timedwrlock(l, c.abs);
    default: return g.pthread_rwlock_clockwrlock(l, c.clock, c.abs);
  }
}

// glibc's order of checks: clock and tv_nsec first (even when the lock is
// free), then EDEADLK if the caller holds the write lock, then the attempt.
// The plain blocking calls skip the first step at compile time.
template <class V>
LOCKSWAP_INLINE int rw_rdlock_take(RwlockObject& o, Call c) {
  bool writer_preferring = o.flags.load(std::memory_order_relaxed) == abi::kRwPreferWriterNonrecursive;
  return V::rdlock(o, c.ctx(), writer_preferring);
}

// A blocking read acquisition of a write-held lock: EDEADLK if the caller is
// that writer. Out of line, so that the fast path makes no call (current_tid()
// may have to ask the kernel) and needs no stack frame.
template <class V>
__attribute__((noinline)) int rw_rdlock_write_held(RwlockObject& o, Call c) {
  if (o.writer_tid.load(std::memory_order_relaxed) == current_tid()) return EDEADLK;
  return rw_rdlock_take<V>(o, c);
}

template <class V>
LOCKSWAP_INLINE int rw_rdlock(pthread_rwlock_t* l, Call c) {
  RwlockObject& o = abi::obj(l);
  if (__builtin_expect(abi::glibc_owned(o), 0)) return delegate_rdlock(l, c);
  if (c.abs != nullptr && (!supported_clock(c.clock) || !valid_nsec(c.abs))) return EINVAL;
  // The try functions report EBUSY instead of EDEADLK, as glibc's do.
  if (c.op != Call::trylock && __builtin_expect(V::write_held(o), 0)) return rw_rdlock_write_held<V>(o, c);
  return rw_rdlock_take<V>(o, c);
}

template <class V>
LOCKSWAP_INLINE int rw_wrlock(pthread_rwlock_t* l, Call c) {
  RwlockObject& o = abi::obj(l);
  if (__builtin_expect(abi::glibc_owned(o), 0)) return delegate_wrlock(l, c);
  if (c.abs != nullptr && (!supported_clock(c.clock) || !valid_nsec(c.abs))) return EINVAL;
  int32_t self = current_tid();
  if (c.op != Call::trylock && __builtin_expect(V::write_held(o), 0) &&
      o.writer_tid.load(std::memory_order_relaxed) == self)
    return EDEADLK;
  int rc = V::wrlock(o, c.ctx());
  if (rc == 0) o.writer_tid.store(self, std::memory_order_relaxed);
  return rc;
}

// Out of line: resolving glibc's table may be a call, which would cost the
// unlock fast path a stack frame.
__attribute__((noinline)) int delegate_rwlock_unlock(pthread_rwlock_t* l) {
  return real::glibc().pthread_rwlock_unlock(l);
}

// The write release, out of line: the read and the write release each may
// call their slow path, and with both inline the unlock needs a stack frame
// on every path (the frame goes where the two calls meet); apart, each slow
// call gets one of its own and the read release none.
template <class V>
__attribute__((noinline)) int rw_write_unlock(RwlockObject& o) {
  o.writer_tid.store(0, std::memory_order_relaxed);
  V::write_unlock(o);
  return 0;
}

template <class V>
LOCKSWAP_INLINE int rw_unlock(pthread_rwlock_t* l) {
  RwlockObject& o = abi::obj(l);
  if (__builtin_expect(abi::glibc_owned(o), 0)) return delegate_rwlock_unlock(l);
  // Only the writer can release a write-held lock (anything else is
  // undefined), so the lock word says which release this is.
  if (V::write_held(o)) return rw_write_unlock<V>(o);
  V::read_unlock(o);
  return 0;
}

// Timed, clock and try acquisitions share one out-of-line body per variant.

// ------------------------------------------------------- native entry points
// Same signatures as glibc's functions; one instantiation per variant.

// A blocking acquisition by a caller with asynchronous cancellation runs
// deferred; only its futex sleeps are asynchronous cancellation points, and a
// cancellation pending when it ends gives the lock back and acts
// (core/cancel.h). Objects glibc owns get glibc's call at the caller's type.
template <class V, bool kTagged>
__attribute__((noinline)) int mutex_acquire_async_caller(pthread_mutex_t* m, Call c) {
  if (abi::glibc_owned(abi::obj(m).kind.load(std::memory_order_relaxed))) return delegate_mutex(m, c);
  return cancel::run_deferred([&] { return mutex_acquire<V, kTagged>(m, c); },
                              [&] { mutex_release<V, kTagged>(m); });
}

template <class V, bool kTagged>
LOCKSWAP_INLINE int mutex_acquire_blocking(pthread_mutex_t* m, Call c) {
  if (cancel::async_caller()) return mutex_acquire_async_caller<V, kTagged>(m, c);
  return mutex_acquire<V, kTagged>(m, c);
}

template <class V, bool kTagged = false>
struct NativeMutex {
  static int lock(pthread_mutex_t* m) { return mutex_acquire_blocking<V, kTagged>(m, {Call::block, 0, nullptr}); }
  static int trylock(pthread_mutex_t* m) { return mutex_acquire<V, kTagged>(m, {Call::trylock, 0, nullptr}); }
  static int timedlock(pthread_mutex_t* m, const timespec* abs) {
    return mutex_acquire_blocking<V, kTagged>(m, {Call::timed, CLOCK_REALTIME, abs});
  }
  static int clocklock(pthread_mutex_t* m, clockid_t clock, const timespec* abs) {
    if (!supported_clock(clock)) return EINVAL;  // glibc checks the clock first
    return mutex_acquire_blocking<V, kTagged>(m, {Call::clocked, clock, abs});
  }
  static int unlock(pthread_mutex_t* m) { return mutex_release<V, kTagged>(m); }
  static int destroy(pthread_mutex_t* m) { return mutex_destroy<V>(m); }
};

int native_mutex_consistent(pthread_mutex_t* m) {
  if (!(abi::obj(m).kind.load(std::memory_order_relaxed) & abi::kKindRobust)) return EINVAL;
  return real::glibc().pthread_mutex_consistent(m);
}

// Blocking rwlock acquisitions of a caller with asynchronous cancellation
// (see mutex_acquire_async_caller).
template <class V>
__attribute__((noinline)) int rw_rdlock_async_caller(pthread_rwlock_t* l, Call c) {
  if (abi::glibc_owned(abi::obj(l))) return delegate_rdlock(l, c);
  return cancel::run_deferred([&] { return rw_rdlock<V>(l, c); }, [&] { rw_unlock<V>(l); });
}
template <class V>
__attribute__((noinline)) int rw_wrlock_async_caller(pthread_rwlock_t* l, Call c) {
  if (abi::glibc_owned(abi::obj(l))) return delegate_wrlock(l, c);
  return cancel::run_deferred([&] { return rw_wrlock<V>(l, c); }, [&] { rw_unlock<V>(l); });
}

template <class V>
struct NativeRwlock {
  static int rdlock(pthread_rwlock_t* l) { return rdlock_cancel_safe(l, {Call::block, 0, nullptr}); }
  static int tryrdlock(pthread_rwlock_t* l) { return rdlock_cancel_safe(l, {Call::trylock, 0, nullptr}); }
  static int timedrdlock(pthread_rwlock_t* l, const timespec* abs) {
    return rdlock_cancel_safe(l, {Call::timed, CLOCK_REALTIME, abs});
  }
  static int clockrdlock(pthread_rwlock_t* l, clockid_t clock, const timespec* abs) {
    return rdlock_cancel_safe(l, {Call::clocked, clock, abs});
  }
  static int wrlock(pthread_rwlock_t* l) { return wrlock_cancel_safe(l, {Call::block, 0, nullptr}); }
  static int trywrlock(pthread_rwlock_t* l) { return wrlock_cancel_safe(l, {Call::trylock, 0, nullptr}); }
  static int timedwrlock(pthread_rwlock_t* l, const timespec* abs) {
    return wrlock_cancel_safe(l, {Call::timed, CLOCK_REALTIME, abs});
  }
  static int clockwrlock(pthread_rwlock_t* l, clockid_t clock, const timespec* abs) {
    return wrlock_cancel_safe(l, {Call::clocked, clock, abs});
  }
  // The try calls come here too: a percid writer's drain (which a try
  // acquisition runs as well) keeps a guard, and an asynchronous cancellation
  // landing in a frame with cleanups, off a call, terminates the process
  // where glibc's lock would just be left as it was.
  LOCKSWAP_INLINE static int rdlock_cancel_safe(pthread_rwlock_t* l, Call c) {
    if (cancel::async_caller()) return rw_rdlock_async_caller<V>(l, c);
    return rw_rdlock<V>(l, c);
  }
  LOCKSWAP_INLINE static int wrlock_cancel_safe(pthread_rwlock_t* l, Call c) {
    if (cancel::async_caller()) return rw_wrlock_async_caller<V>(l, c);
    return rw_wrlock<V>(l, c);
  }
  static int unlock(pthread_rwlock_t* l) { return rw_unlock<V>(l); }
};

int native_rwlock_init(pthread_rwlock_t* l, const pthread_rwlockattr_t* attr) {
  int kind = PTHREAD_RWLOCK_DEFAULT_NP, pshared = PTHREAD_PROCESS_PRIVATE;
  if (attr != nullptr) {
    pthread_rwlockattr_getkind_np(attr, &kind);
    pthread_rwlockattr_getpshared(attr, &pshared);
  }
  if (pshared != PTHREAD_PROCESS_PRIVATE) return real::glibc().pthread_rwlock_init(l, attr);
  memset(static_cast<void*>(l), 0, sizeof *l);
  abi::obj(l).flags.store(static_cast<uint32_t>(kind), std::memory_order_relaxed);
  return 0;
}

// glibc's destroy of a private rwlock checks nothing; a variant that keeps
// state outside the object (percid's reader slots) gets to release it.
template <class V>
int native_rwlock_destroy(pthread_rwlock_t* l) {
  if (abi::glibc_owned(abi::obj(l))) return real::glibc().pthread_rwlock_destroy(l);
  if constexpr (requires(RwlockObject& o) { V::destroy(o); }) V::destroy(abi::obj(l));
  return 0;
}

// ------------------------------------------------------------------- cond

Cond& cond_obj(pthread_cond_t* c) { return *reinterpret_cast<Cond*>(c); }
static_assert(sizeof(Cond) <= sizeof(pthread_cond_t));

// The futex sleep inside a condition or semaphore wait is the cancellation
// point. Async cancellation is enabled only around the system call itself
// (not around WaitCtx's before-sleep hook, which may hold an allocator lock),
// inside a function that has no cleanups of its own: a cancellation unwinds
// straight out of it into the waiting object's guard (Cond::wait re-takes the
// mutex, a semaphore unregisters its waiter) before the caller's handlers run.
struct AsyncCancelAround {
  template <class FutexCall>
  int operator()(FutexCall&& futex_call) const {
    int old_type;
    cancel::set_type(PTHREAD_CANCEL_ASYNCHRONOUS, &old_type);
    int rc = futex_call();
    cancel::set_type(old_type, &old_type);
    return rc;
  }
};

// A caller that enabled asynchronous cancellation may be cancelled at any
// instruction; inside a wait that must happen only in the futex sleep, where
// the waiting object's guard makes its state consistent (not, say, between
// releasing the mutex and arming Cond::wait's guard). So a wait runs with
// deferred cancellation and CancellableSleeper enables the asynchronous kind
// around the system call alone. The caller's type is restored on a normal
// return only (restoring it acts on a cancellation that arrived meanwhile, at
// a point where the state is consistent); a forced unwind never comes back.
template <class Wait>
__attribute__((noinline)) int with_deferred_cancellation(Wait&& wait) {
  int old_type;
  cancel::set_type(PTHREAD_CANCEL_DEFERRED, &old_type);
  // The wait's guards live in its own frame: this one has no cleanups, so the
  // caller's type may come back here (core/cancel.h restore_async).
  int rc = cancel::call_in_own_frame(wait);
  if (old_type != PTHREAD_CANCEL_DEFERRED) return cancel::restore_async(rc);
  return rc;
}

// The frame in which asynchronous cancellation is enabled must have no
// cleanups: an unwind that starts at an arbitrary instruction of a frame with
// cleanups finds no call-site entry there and terminates the process.
template <class Plain>
struct AsyncCancelSleep {
  __attribute__((noinline)) static int sleep(const std::atomic<uint32_t>* word, uint32_t expected,
                                             const WaitCtx& ctx, bool shared) {
    return Plain::sleep_around(word, expected, ctx, shared, AsyncCancelAround{});
  }
};

template <class Plain>
struct CancellableSleeper {
  __attribute__((noinline)) static int sleep(const std::atomic<uint32_t>* word, uint32_t expected,
                                             const WaitCtx& ctx, bool shared) {
    // A read holder asleep here may be what a reader blocked on its rwlock
    // waits for (core/read_pref.h rule (a)).
    read_pref::ReadHolderSleep holder_asleep;
    return AsyncCancelSleep<Plain>::sleep(word, expected, ctx, shared);
  }
};

// The mutex is released and re-taken through the table, so every kind and
// delegated object behaves as with a direct call.
int cond_wait_native(pthread_cond_t* c, pthread_mutex_t* m, const WaitCtx& ctx) {
  return with_deferred_cancellation([&] {
    return cond_obj(c).wait<CancellableSleeper<PlainSleeper>>([m] { return g_ops.pthread_mutex_unlock(m); },
                                                              [m] { return g_ops.pthread_mutex_lock(m); }, ctx);
  });
}

int cond_init_native(pthread_cond_t* c, const pthread_condattr_t* attr) {
  clockid_t clock = CLOCK_REALTIME;
  int pshared = PTHREAD_PROCESS_PRIVATE;
  if (attr != nullptr) {
    pthread_condattr_getclock(attr, &clock);
    pthread_condattr_getpshared(attr, &pshared);
  }
  memset(static_cast<void*>(c), 0, sizeof *c);
  cond_obj(c).init(clock == CLOCK_MONOTONIC, pshared != PTHREAD_PROCESS_PRIVATE);
  return 0;
}

// ------------------------------------------------------------- semaphores

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
    return take(s, WaitCtx::until(CLOCK_REALTIME, abs));
  }
  static int clockwait(sem_t* s, clockid_t clock, const timespec* abs) {
    if (!supported_clock(clock) || !valid_nsec(abs)) return sem_result(EINVAL);
    return take(s, WaitCtx::until(clock, abs));
  }
  // A unit at once, or the wait with deferred cancellation around it.
  static int take(sem_t* s, WaitCtx ctx) {
    if (__builtin_expect(V::trywait(s) == 0, 1)) return 0;
    return sleep_for_unit(s, ctx);
  }
  // Out of line, so that sem_wait's fast path builds no WaitCtx and keeps no frame.
  __attribute__((noinline)) static int wait_slow(sem_t* s) { return sleep_for_unit(s, WaitCtx::blocking()); }
  __attribute__((noinline)) static int act_on_cancel_then_wait(sem_t* s) {
    pthread_testcancel();
    return take(s, WaitCtx::blocking());
  }
  __attribute__((noinline)) static int sleep_for_unit(sem_t* s, WaitCtx ctx) {
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

// ---------------------------------------------------------------- C11 glue

int thrd_result(int err) {
  switch (err) {
    case 0: return thrd_success;
    case EBUSY: return thrd_busy;
    case ETIMEDOUT: return thrd_timedout;
    case ENOMEM: return thrd_nomem;
    default: return thrd_error;
  }
}


// Native condvar entry points (used with every native mutex variant; the
// condvar is glibc's exactly when the mutex variant is, because glibc's
// condvar reaches into glibc's mutex layout).
struct NativeCond {
  static int init(pthread_cond_t* c, const pthread_condattr_t* attr) { return cond_init_native(c, attr); }
  static int destroy(pthread_cond_t* c) {
    cond_obj(c).destroy();
    return 0;
  }
  static int signal(pthread_cond_t* c) {
    cond_obj(c).signal();
    return 0;
  }
  static int broadcast(pthread_cond_t* c) {
    cond_obj(c).broadcast();
    return 0;
  }
  static int wait(pthread_cond_t* c, pthread_mutex_t* m) { return cond_wait_native(c, m, WaitCtx::blocking()); }
  static int timedwait(pthread_cond_t* c, pthread_mutex_t* m, const timespec* abs) {
    if (!valid_nsec(abs)) return EINVAL;
    return cond_wait_native(c, m, WaitCtx::until(cond_obj(c).clock(), abs));
  }
  static int clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock, const timespec* abs) {
    if (!supported_clock(clock) || !valid_nsec(abs)) return EINVAL;
    return cond_wait_native(c, m, WaitCtx::until(clock, abs));
  }
};

// ------------------------------------------------------------- the table

void install_glibc_mutex_and_cond(OpsTable& t, const OpsTable& g) {
#define COPY(fn) t.fn = g.fn;
  COPY(pthread_mutex_init) COPY(pthread_mutex_destroy) COPY(pthread_mutex_lock) COPY(pthread_mutex_trylock)
  COPY(pthread_mutex_timedlock) COPY(pthread_mutex_clocklock) COPY(pthread_mutex_unlock) COPY(pthread_mutex_consistent)
  COPY(pthread_cond_init) COPY(pthread_cond_destroy) COPY(pthread_cond_wait) COPY(pthread_cond_timedwait)
  COPY(pthread_cond_clockwait) COPY(pthread_cond_signal) COPY(pthread_cond_broadcast)
#undef COPY
}

void install_glibc_rwlock(OpsTable& t, const OpsTable& g) {
#define COPY(fn) t.fn = g.fn;
  COPY(pthread_rwlock_init) COPY(pthread_rwlock_destroy) COPY(pthread_rwlock_rdlock) COPY(pthread_rwlock_tryrdlock)
  COPY(pthread_rwlock_timedrdlock) COPY(pthread_rwlock_clockrdlock) COPY(pthread_rwlock_wrlock)
  COPY(pthread_rwlock_trywrlock) COPY(pthread_rwlock_timedwrlock) COPY(pthread_rwlock_clockwrlock)
  COPY(pthread_rwlock_unlock)
#undef COPY
}

void install_native_cond(OpsTable& t);

template <class V, bool kTagged = false>
void install_mutex_and_cond(OpsTable& t) {
  if constexpr (V::forwards_to_glibc) {
    install_glibc_mutex_and_cond(t, real::glibc());
  } else {
    using M = NativeMutex<V, kTagged>;
    t.pthread_mutex_init = mutex_init_native;
    t.pthread_mutex_destroy = M::destroy;
    t.pthread_mutex_lock = M::lock;
    t.pthread_mutex_trylock = M::trylock;
    t.pthread_mutex_timedlock = M::timedlock;
    t.pthread_mutex_clocklock = M::clocklock;
    t.pthread_mutex_unlock = M::unlock;
    t.pthread_mutex_consistent = native_mutex_consistent;
    install_native_cond(t);
  }
}

void install_native_cond(OpsTable& t) {
  {
    t.pthread_cond_init = NativeCond::init;
    t.pthread_cond_destroy = NativeCond::destroy;
    t.pthread_cond_wait = NativeCond::wait;
    t.pthread_cond_timedwait = NativeCond::timedwait;
    t.pthread_cond_clockwait = NativeCond::clockwait;
    t.pthread_cond_signal = NativeCond::signal;
    t.pthread_cond_broadcast = NativeCond::broadcast;
  }
}

template <class V>
void install_rwlock(OpsTable& t) {
  if constexpr (V::forwards_to_glibc) {
    install_glibc_rwlock(t, real::glibc());
  } else {
    using R = NativeRwlock<V>;
    t.pthread_rwlock_init = native_rwlock_init;
    t.pthread_rwlock_destroy = native_rwlock_destroy<V>;
    t.pthread_rwlock_rdlock = R::rdlock;
    t.pthread_rwlock_tryrdlock = R::tryrdlock;
    t.pthread_rwlock_timedrdlock = R::timedrdlock;
    t.pthread_rwlock_clockrdlock = R::clockrdlock;
    t.pthread_rwlock_wrlock = R::wrlock;
    t.pthread_rwlock_trywrlock = R::trywrlock;
    t.pthread_rwlock_timedwrlock = R::timedwrlock;
    t.pthread_rwlock_clockwrlock = R::clockwrlock;
    t.pthread_rwlock_unlock = R::unlock;
  }
}

void install_glibc_sem(OpsTable& t, const OpsTable& g) {
#define COPY(fn) t.fn = g.fn;
  COPY(sem_init) COPY(sem_destroy) COPY(sem_wait) COPY(sem_trywait) COPY(sem_timedwait) COPY(sem_clockwait)
  COPY(sem_post) COPY(sem_getvalue)
#undef COPY
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

// ------------------------------------------------------ per-lock selection
// LOCKSWAP_SELECT (preload/select.h). A family named by a rule gets mixed
// entries in g_ops: each reads the object's selection tag (abi.h) and jumps
// through that variant's table, the tag indexing `g_by_tag`. Tag 0 (not
// decided yet) and values no variant has index tables of `decide` entries:
// the object's first sight, where the rules are asked once and the tag is
// set with a compare-and-swap, so that two first users agree. Objects glibc
// must own (robust, PI/PP, process-shared) and destroyed ones get no tag and
// keep the process-wide variant (`g_base`), as without rules. Families
// without a rule keep their variant's table: nothing changes for them.

using select::Family;
constexpr unsigned kTagSlots = abi::kTagValues;
static_assert(static_cast<unsigned>(RwlockVariant::percid) <= abi::kTagVariantMask &&
              kTagSlots - 1 == abi::kKindTagMask >> abi::kKindTagShift);
#define COUNT(id, name, type, desc) +1
// A destroyed mutex's __kind (-1) reads as tag 15: no variant may have it (it
// reaches `decide`, which returns the process-wide table).
static_assert(0 LOCKSWAP_MUTEX_VARIANTS(COUNT) < abi::kTagVariantMask);
#undef COUNT
OpsTable g_by_tag[3][kTagSlots];
OpsTable g_base;             // the process-wide variants (untagged instantiations)
unsigned g_base_tag[3];      // their tags

int family_index(pthread_mutex_t*) { return static_cast<int>(Family::mutex); }
int family_index(pthread_rwlock_t*) { return static_cast<int>(Family::rwlock); }
int family_index(sem_t*) { return static_cast<int>(Family::sem); }

LOCKSWAP_INLINE unsigned tag_of(pthread_mutex_t* m) { return abi::mutex_tag(abi::obj(m).kind.load(std::memory_order_relaxed)); }
LOCKSWAP_INLINE unsigned tag_of(pthread_rwlock_t* l) { return abi::rwlock_tag(l).load(std::memory_order_relaxed) & (kTagSlots - 1); }
LOCKSWAP_INLINE unsigned tag_of(sem_t* s) { return abi::sem_tag(s).load(std::memory_order_relaxed) & (kTagSlots - 1); }

bool g_variant_tag[3][kTagSlots];  // the tags that name a variant
bool is_variant_tag(int family, unsigned tag) { return g_variant_tag[family][tag]; }

// The selected lock whose call this thread is in (counted_apart), for a
// signal handler's nested call to hand over what it had counted.
__thread const void* t_counting_for __attribute__((tls_model("initial-exec")));

// The call site the rules see: the caller of the export that reached a
// mixed entry by tail jumps, or the one a profiling wrapper in between saw.
LOCKSWAP_INLINE uintptr_t site_of_call(void* ra, void* cfa) {
  return g_config.profile ? select::t_site_hint : select::caller_ip(ra, cfa);
}

// The tag of an object first seen from `site`: a rule's variant, marked
// kTagSelected when its events get counters of their own, else the
// process-wide variant's.
unsigned choose(Family f, const void* object, uintptr_t site) {
  int rule;
  unsigned v = select::decide(f, object, site, &rule);
  if (v == 0) return g_base_tag[static_cast<int>(f)];
  // Only a run that writes statistics (LOCKSWAP_STATS=counts|profile) pays
  // for counting apart: a few instructions per call of the selected lock.
  bool apart = LOCKSWAP_LOCK_EVENTS && g_config.stats &&
               select::note_selected(f, object, static_cast<uint8_t>(v), rule);
  return apart ? v | abi::kTagSelected : v;
}

__attribute__((noinline)) const OpsTable& decided_table(pthread_mutex_t* m, uintptr_t site) {
  std::atomic<int32_t>& kind = abi::obj(m).kind;
  int k = kind.load(std::memory_order_relaxed);
  for (;;) {
    if (k == abi::kKindDestroyed || abi::glibc_owned(k)) return g_base;
    if (unsigned tag = abi::mutex_tag(k); tag != 0) return is_variant_tag(0, tag) ? g_by_tag[0][tag] : g_base;
    unsigned v = choose(Family::mutex, m, site);
    if (kind.compare_exchange_weak(k, abi::with_tag(k, v), std::memory_order_relaxed)) return g_by_tag[0][v];
  }
}

// The tag word of a rwlock or semaphore: 0 until decided, the variant after.
template <class Obj>
const OpsTable& decided_by_word(Obj* o, std::atomic_ref<uint32_t> word, bool glibc_owned, uintptr_t site) {
  int f = family_index(o);
  if (glibc_owned) return g_base;
  uint32_t tag = word.load(std::memory_order_relaxed);
  for (;;) {
    if (tag != 0) return tag < kTagSlots && is_variant_tag(f, tag) ? g_by_tag[f][tag] : g_base;
    unsigned v = choose(static_cast<Family>(f), o, site);
    if (word.compare_exchange_weak(tag, v, std::memory_order_relaxed)) return g_by_tag[f][v];
  }
}
__attribute__((noinline)) const OpsTable& decided_table(pthread_rwlock_t* l, uintptr_t site) {
  return decided_by_word(l, abi::rwlock_tag(l), abi::glibc_owned(abi::obj(l)), site);
}
__attribute__((noinline)) const OpsTable& decided_table(sem_t* s, uintptr_t site) {
  return decided_by_word(s, abi::sem_tag(s), abi::sem_shared(s), site);
}

// Every slot whose first argument is the lock object. `by_tag` is the slot's
// column of g_by_tag, so that the entry is one indexed jump.
template <auto Slot>
struct Mixed;
template <class R, class Obj, class... A, R (*OpsTable::*Slot)(Obj*, A...)>
struct Mixed<Slot> {
  static inline R (*by_tag[kTagSlots])(Obj*, A...);
  static void fill() {
    for (unsigned tag = 0; tag < kTagSlots; ++tag) by_tag[tag] = g_by_tag[family_index(static_cast<Obj*>(nullptr))][tag].*Slot;
  }
  static R call(Obj* o, A... args) { return by_tag[tag_of(o)](o, args...); }
  // A selected lock (kTagSelected): its variant's entry, with the slot's
  // kEventsApart bit set, so that the lock events of the call are also
  // counted for this lock (select::hand_over_events). A thread on the shared
  // slot counts with the process only. A signal handler's selected-lock call
  // inside hands over what its interrupted call had counted first, and leaves
  // the bit and the object as it found them.
  static R counted_apart(Obj* o, A... args) {
    ThreadSlot& s = self_slot();
    if (is_shared(s)) return by_tag[tag_of(o) & abi::kTagVariantMask](o, args...);
    uint8_t outer_mode = s.event_mode;
    const void* outer = t_counting_for;
    if (s.apart_pending) select::hand_over_events(outer, s);
    t_counting_for = o;
    s.event_mode = kEventsApart;
    asm volatile("" ::: "memory");  // set before the call's first event, handler included
    R r = by_tag[tag_of(o) & abi::kTagVariantMask](o, args...);
    asm volatile("" ::: "memory");
    if (s.apart_pending) select::hand_over_events(o, s);
    s.event_mode = outer_mode;
    t_counting_for = outer;
    return r;
  }
  // Reached from call() by a tail jump: the return address is the caller's.
  static R decide(Obj* o, A... args) {
    uintptr_t site = site_of_call(__builtin_return_address(0), __builtin_dwarf_cfa());
    return (decided_table(o, site).*Slot)(o, args...);
  }
};

// Initialisation always decides (again: destroy + init re-decides), from
// the init call's site; the tag is written before the object is published.
int mixed_mutex_init(pthread_mutex_t* m, const pthread_mutexattr_t* a) {
  unsigned v = choose(Family::mutex, m, site_of_call(__builtin_return_address(0), __builtin_dwarf_cfa()));
  int rc = g_by_tag[0][v].pthread_mutex_init(m, a);
  int k = abi::obj(m).kind.load(std::memory_order_relaxed);
  if (rc == 0 && !abi::glibc_owned(k)) abi::obj(m).kind.store(abi::with_tag(k, v), std::memory_order_relaxed);
  return rc;
}
int mixed_rwlock_init(pthread_rwlock_t* l, const pthread_rwlockattr_t* a) {
  unsigned v = choose(Family::rwlock, l, site_of_call(__builtin_return_address(0), __builtin_dwarf_cfa()));
  int rc = g_by_tag[1][v].pthread_rwlock_init(l, a);
  if (rc == 0 && !abi::glibc_owned(abi::obj(l))) abi::rwlock_tag(l).store(v, std::memory_order_relaxed);
  return rc;
}
// A process-shared semaphore keeps the process-wide variant untagged: every
// variant keeps glibc's word for it (core/sem.h), so processes agree.
int mixed_sem_init(sem_t* s, int pshared, unsigned value) {
  if (pshared != 0) return g_base.sem_init(s, pshared, value);
  unsigned v = choose(Family::sem, s, site_of_call(__builtin_return_address(0), __builtin_dwarf_cfa()));
  int rc = g_by_tag[2][v].sem_init(s, pshared, value);
  if (rc == 0) abi::sem_tag(s).store(v, std::memory_order_relaxed);
  return rc;
}

#define LOCKSWAP_MUTEX_OBJECT_SLOTS(X)                                                                    \
  X(pthread_mutex_destroy) X(pthread_mutex_lock) X(pthread_mutex_trylock) X(pthread_mutex_timedlock) \
  X(pthread_mutex_clocklock) X(pthread_mutex_unlock) X(pthread_mutex_consistent)
#define LOCKSWAP_RWLOCK_OBJECT_SLOTS(X)                                                                      \
  X(pthread_rwlock_destroy) X(pthread_rwlock_rdlock) X(pthread_rwlock_tryrdlock) X(pthread_rwlock_timedrdlock) \
  X(pthread_rwlock_clockrdlock) X(pthread_rwlock_wrlock) X(pthread_rwlock_trywrlock)                         \
  X(pthread_rwlock_timedwrlock) X(pthread_rwlock_clockwrlock) X(pthread_rwlock_unlock)
#define LOCKSWAP_SEM_OBJECT_SLOTS(X) \
  X(sem_destroy) X(sem_wait) X(sem_trywait) X(sem_timedwait) X(sem_clockwait) X(sem_post) X(sem_getvalue)

// A selected lock's table: its variant's, each object slot counting apart.
void fill_counted_apart(int family, unsigned variant_tag) {
  OpsTable& t = g_by_tag[family][variant_tag | abi::kTagSelected];
  t = g_by_tag[family][variant_tag];
#define APART(fn) t.fn = &Mixed<&OpsTable::fn>::counted_apart;
  switch (static_cast<Family>(family)) {
    case Family::mutex: LOCKSWAP_MUTEX_OBJECT_SLOTS(APART) break;
    case Family::rwlock: LOCKSWAP_RWLOCK_OBJECT_SLOTS(APART) break;
    case Family::sem: LOCKSWAP_SEM_OBJECT_SLOTS(APART) break;
  }
#undef APART
  g_variant_tag[family][variant_tag | abi::kTagSelected] = true;
}

// g_by_tag: each variant's table at its tag, the counting one at the tag
// with kTagSelected, `decide` entries elsewhere.
void fill_tag_tables() {
#define DECIDE(fn) t.fn = &Mixed<&OpsTable::fn>::decide;
  for (OpsTable& t : g_by_tag[0]) { LOCKSWAP_MUTEX_OBJECT_SLOTS(DECIDE) }
  for (OpsTable& t : g_by_tag[1]) { LOCKSWAP_RWLOCK_OBJECT_SLOTS(DECIDE) }
  for (OpsTable& t : g_by_tag[2]) { LOCKSWAP_SEM_OBJECT_SLOTS(DECIDE) }
#undef DECIDE
#define X(id, name, type, desc)                                                  \
  install_mutex_and_cond<type, true>(g_by_tag[0][static_cast<unsigned>(MutexVariant::id)]); \
  g_variant_tag[0][static_cast<unsigned>(MutexVariant::id)] = true;
  LOCKSWAP_MUTEX_VARIANTS(X)
#undef X
#define X(id, name, type, desc)                                             \
  install_rwlock<type>(g_by_tag[1][static_cast<unsigned>(RwlockVariant::id)]); \
  g_variant_tag[1][static_cast<unsigned>(RwlockVariant::id)] = true;
  LOCKSWAP_RWLOCK_VARIANTS(X)
#undef X
#define X(id, name, type, desc)                                       \
  install_sem<type>(g_by_tag[2][static_cast<unsigned>(SemVariant::id)]); \
  g_variant_tag[2][static_cast<unsigned>(SemVariant::id)] = true;
  LOCKSWAP_SEM_VARIANTS(X)
#undef X
  for (int family = 0; family < 3; ++family)
    for (unsigned tag = 1; tag <= abi::kTagVariantMask; ++tag)
      if (g_variant_tag[family][tag]) fill_counted_apart(family, tag);
#define FILL(fn) Mixed<&OpsTable::fn>::fill();
  LOCKSWAP_MUTEX_OBJECT_SLOTS(FILL) LOCKSWAP_RWLOCK_OBJECT_SLOTS(FILL) LOCKSWAP_SEM_OBJECT_SLOTS(FILL)
#undef FILL
}

// Turns the families named by rules in `t` (the process-wide table) into
// mixed ones. Runs once (racing installers wait for the first).
void install_mixed(OpsTable& t) {
  static std::atomic<int> state{0};
  int expected = 0;
  if (state.compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
    g_base = t;
    g_base_tag[0] = static_cast<unsigned>(mutex_variant());
    g_base_tag[1] = static_cast<unsigned>(rwlock_variant());
    g_base_tag[2] = static_cast<unsigned>(sem_variant());
    fill_tag_tables();
    state.store(2, std::memory_order_release);
  }
  while (state.load(std::memory_order_acquire) != 2) sched_yield();
#define MIXED(fn) t.fn = &Mixed<&OpsTable::fn>::call;
  if (select::active(Family::mutex)) {
    LOCKSWAP_MUTEX_OBJECT_SLOTS(MIXED)
    t.pthread_mutex_init = mixed_mutex_init;
    // glibc's condvar reaches into glibc's mutex layout: with mutexes of
    // several variants, the native condvar, which takes the mutex through
    // g_ops (the mixed entries), serves them all.
    install_native_cond(t);
  }
  if (select::active(Family::rwlock)) {
    LOCKSWAP_RWLOCK_OBJECT_SLOTS(MIXED)
    t.pthread_rwlock_init = mixed_rwlock_init;
  }
  if (select::active(Family::sem)) {
    LOCKSWAP_SEM_OBJECT_SLOTS(MIXED)
    t.sem_init = mixed_sem_init;
  }
#undef MIXED
}

std::atomic<bool> g_ops_installed{false};

// Fill the table from the configuration (idempotent; racing first calls all
// write the same pointers, each pointer-sized store being atomic on every
// supported ISA). The table is completed in `t` and then published slot by
// slot, so a racing installer never exposes an intermediate pointer (with
// statistics on: a variant's function where the wrapper belongs).
__attribute__((noinline)) void install_ops() {
  if (g_ops_installed.load(std::memory_order_acquire)) return;
  OpsTable t = {};
  switch (mutex_variant()) {
#define X(id, name, type, desc) \
  case MutexVariant::id:        \
    install_mutex_and_cond<type>(t); \
    break;
    LOCKSWAP_MUTEX_VARIANTS(X)
#undef X
    default:
      break;
  }
  switch (rwlock_variant()) {
#define X(id, name, type, desc) \
  case RwlockVariant::id:       \
    install_rwlock<type>(t);    \
    break;
    LOCKSWAP_RWLOCK_VARIANTS(X)
#undef X
    default:
      break;
  }
  switch (sem_variant()) {
#define X(id, name, type, desc) \
  case SemVariant::id:          \
    install_sem<type>(t);       \
    break;
    LOCKSWAP_SEM_VARIANTS(X)
#undef X
    default:
      break;
  }
  if (select::active(Family::mutex) || select::active(Family::rwlock) || select::active(Family::sem))
    install_mixed(t);
  // LOCKSWAP_STATS=profile: the variant's table moves inside the profiling
  // wrappers (preload/stats.cpp). Off or counts, nothing here or on any lock
  // path changes.
  if (g_config.profile) stats::install(t);
#define X(name, ret, params, args, sleeps) __atomic_store_n(&g_ops.name, t.name, __ATOMIC_RELEASE);
  LOCKSWAP_REAL_FUNCTIONS(X)
#undef X
  g_ops_installed.store(true, std::memory_order_release);
}

// First-call stubs: read the configuration, fill the table, call through it.
template <auto Slot>
struct FirstCall;
template <class R, class... A, R (*OpsTable::*Slot)(A...)>
struct FirstCall<Slot> {
  static R call(A... args) {
    install_ops();
    return (g_ops.*Slot)(args...);
  }
};

OpsTable g_ops = {
#define X(name, ret, params, args, sleeps) &FirstCall<&OpsTable::name>::call,
    LOCKSWAP_REAL_FUNCTIONS(X)
#undef X
};

}  // namespace
}  // namespace lockswap

using namespace lockswap;

// =================================================================== exports
// Each is a tail jump through the table.

// glibc's pthread_setcanceltype, plus the mirror of the type that lets a
// blocking call of a native variant know in one TLS load whether its caller
// may be cancelled asynchronously (core/cancel.h). lockswap's own type
// switches come through here too, so the mirror is the thread's real type.
namespace lockswap {
namespace {
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
#define X(name, ret, params, args, sleeps) \
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
LOCKSWAP_EXPORT int cnd_wait(cnd_t* c, mtx_t* mtx) {
  return thrd_result(pthread_cond_wait(reinterpret_cast<pthread_cond_t*>(c), reinterpret_cast<pthread_mutex_t*>(mtx)));
}
LOCKSWAP_EXPORT int cnd_timedwait(cnd_t* __restrict c, mtx_t* __restrict mtx, const timespec* __restrict abs) {
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
