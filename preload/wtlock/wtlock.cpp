// preload/wtlock/wtlock.cpp — WiredTiger's rwlock functions, interposed.
//
// Design
// ------
// libwiredtiger.so exports __wt_rwlock_init, __wt_rwlock_destroy,
// __wt_readlock, __wt_try_readlock, __wt_readunlock, __wt_writelock,
// __wt_try_writelock and __wt_writeunlock, and calls every one of them
// through its PLT; liblockswap.so, loaded first, exports the same names and
// so receives every call (docs/wtlock.md). Each export is one indirect jump
// through `Dispatch::ops`, as the pthread exports jump through g_ops:
//
//   first call   a stub per slot installs the table (once, under a flag; a
//                racing caller waits for it) and calls through it again.
//                The constructor installs it before main when WiredTiger is
//                already loaded.
//   off          the slots hold WiredTiger's own functions (dlsym RTLD_NEXT,
//                resolved once): WiredTiger as without lockswap, one jump
//                more. Never checks the version.
//   wt           WiredTiger's functions called from the adapter
//                (variants.h), so that the profiler wraps them: the control.
//   rwsem*       the adapter's rwsem on the struct; nothing resolved.
//   profile      (LOCKSWAP_STATS=profile, any variant but off) the slots hold
//                wrappers that time the adapter's functions through
//                preload/stats.h's outside_* calls (try first, then the
//                blocking call, as the rwlock wrappers do).
//
// Version check: the layout in variants.h is WiredTiger 3.2's. Every variant
// but off asks wiredtiger_version() (dlsym RTLD_DEFAULT, the first
// definition in the process) when it installs and stops the process with
// exit status 2 on any other minor version, or on a diagnostic build (whose
// __wt_rwlock_islocked reads the lock word): before main when WiredTiger is
// loaded with the program, else at the first interposed call.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <type_traits>

#include "core/nocancel_io.h"
#include "preload/config.h"
#include "preload/diag.h"
#include "preload/registry.h"
#include "preload/select.h"
#include "preload/stats.h"
#include "preload/stats_table.h"
#include "preload/wtlock/variants.h"

namespace lockswap::wtlock {
namespace {

using Table = RealFunctions;  // the dispatch table has WiredTiger's eight slots

// --------------------------------------------------------------- versions

struct CheckedVersion {
  int major, minor;  // any patch release of it
};
// Versions whose WT_RWLOCK layout and call paths were checked (docs/wtlock.md,
// "Adding a version").
inline constexpr CheckedVersion kCheckedVersions[] = {{3, 2}};

using VersionFn = const char* (*)(int*, int*, int*);

// Out of a constructor or a lock call: diag_fd() is gone once start-up had
// nothing more to say, and then the program's stderr gets the refusal.
void say(const char* s) {
  if (diag_fd() >= 0) return diag(s);
  (void)nocancel::write(2, s, strlen(s));
}

void say_number(int v) {
  char buf[16];
  stats::Out o{buf, sizeof buf - 1};
  o.dec(static_cast<uint64_t>(v < 0 ? 0 : v));
  buf[o.len] = '\0';
  say(buf);
}

[[noreturn]] void refuse(const char* found_text, int major, int minor, int patch) {
  say("lockswap: LOCKSWAP_WTLOCK=");
  say(variant_name(wtlock_variant()));
  if (found_text == nullptr) {
    say(": WiredTiger's wiredtiger_version() is not in the process, so its version cannot be checked");
  } else {
    say(": WiredTiger ");
    say_number(major), say("."), say_number(minor), say("."), say_number(patch);
    say(" is not a version whose WT_RWLOCK lockswap has checked");
  }
  say(" (checked:");
  for (const CheckedVersion& v : kCheckedVersions) say(" "), say_number(v.major), say("."), say_number(v.minor), say(".x");
  say("); its rwlock layout may differ and locks could be corrupted.\n"
      "  Unset LOCKSWAP_WTLOCK (or set it to off), or check this version (docs/wtlock.md, \"Adding a version\").\n");
  _exit(2);
}

// A diagnostic build (HAVE_DIAGNOSTIC) has __wt_rwlock_islocked, which reads
// the ticket word itself in WT_ASSERTs; on the rwsem's count it would answer
// wrongly (a free lock with WAITERS set reads as locked). Release builds,
// Debian's among them, have no such function: nothing but the eight
// interposed functions reads the word.
[[noreturn]] void refuse_diagnostic_build() {
  say("lockswap: LOCKSWAP_WTLOCK=");
  say(variant_name(wtlock_variant()));
  say(": this WiredTiger is a diagnostic build: its __wt_rwlock_islocked reads the lock word, which a swapped\n"
      "  variant lays out differently. Use a release build, or LOCKSWAP_WTLOCK=off (docs/wtlock.md).\n");
  _exit(2);
}

// True when WiredTiger is loaded and checked; false when it is not loaded
// (yet). Refuses an unchecked version or a diagnostic build.
bool version_checked() {
  auto fn = reinterpret_cast<VersionFn>(dlsym(RTLD_DEFAULT, "wiredtiger_version"));
  if (fn == nullptr) return false;
  int major = -1, minor = -1, patch = -1;
  const char* text = fn(&major, &minor, &patch);
  bool checked = false;
  for (const CheckedVersion& v : kCheckedVersions) checked = checked || (v.major == major && v.minor == minor);
  if (!checked) refuse(text != nullptr ? text : "", major, minor, patch);
  if (dlsym(RTLD_DEFAULT, "__wt_rwlock_islocked") != nullptr) refuse_diagnostic_build();
  return true;
}

// ---------------------------------------------------- WiredTiger's functions

Table g_real;

template <class Fn>
void resolve_one(Fn& slot, const char* name) {
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
  if (fn == nullptr) {
    say("lockswap: LOCKSWAP_WTLOCK: cannot find WiredTiger's ");
    say(name);
    say(" after lockswap in the process\n");
    _exit(2);
  }
  __atomic_store_n(&slot, fn, __ATOMIC_RELEASE);
}

// Every slot of the table with WiredTiger's name for its function.
template <class F>
void for_each_slot(F&& f) {
  f(&Table::init, "__wt_rwlock_init");
  f(&Table::destroy, "__wt_rwlock_destroy");
  f(&Table::readlock, "__wt_readlock");
  f(&Table::try_readlock, "__wt_try_readlock");
  f(&Table::readunlock, "__wt_readunlock");
  f(&Table::writelock, "__wt_writelock");
  f(&Table::try_writelock, "__wt_try_writelock");
  f(&Table::writeunlock, "__wt_writeunlock");
}

// Idempotent: racing first callers store the same pointers.
void resolve_real() {
  for_each_slot([](auto slot, const char* name) { resolve_one(g_real.*slot, name); });
}

// ------------------------------------------------------------- the tables

template <class A>
constexpr Table table_of() {
  return {A::init, A::destroy, A::readlock, A::try_readlock, A::readunlock, A::writelock, A::try_writelock,
          A::writeunlock};
}

Table chosen_table(WtlockVariant v) {
  switch (v) {
#define X(id, name, type, desc) \
  case WtlockVariant::id:       \
    return table_of<type>();
    LOCKSWAP_WTLOCK_VARIANTS(X)
#undef X
    default:
      return table_of<WtlockOff>();
  }
}

// ------------------------------------------------------ profiling wrappers

Table g_inner;  // the variant's functions, under the wrappers

struct CallArgs {
  Session* s;
  Rwlock* l;
};

// The variant's function of `Slot` as stats::OutsideCall (0 for a void one).
template <auto Slot>
int call_inner(void* p) {
  auto* a = static_cast<CallArgs*>(p);
  auto fn = __atomic_load_n(&(g_inner.*Slot), __ATOMIC_ACQUIRE);
  if constexpr (std::is_void_v<decltype(fn(a->s, a->l))>) {
    fn(a->s, a->l);
    return 0;
  } else {
    return fn(a->s, a->l);
  }
}

constexpr auto kWt = static_cast<uint8_t>(stats::Kind::wtlock);

#define LOCKSWAP_WT_CALLER() select::caller_ip(__builtin_return_address(0), __builtin_dwarf_cfa())

// An acquisition, profiled: the variant's try function first, then `Slot`
// (itself, for the try calls), as the rwlock wrappers of preload/stats.cpp do.
template <auto Slot, stats::Op kOp, bool kRead>
struct Acquire;
template <class R, R (*Table::*Slot)(Session*, Rwlock*), stats::Op kOp, bool kRead>
struct Acquire<Slot, kOp, kRead> {
  static constexpr bool kTry = kOp == stats::Op::tryrdlock || kOp == stats::Op::trywrlock;
  static constexpr auto kTrySlot = kRead ? &Table::try_readlock : &Table::try_writelock;
  static R call(Session* s, Rwlock* l) {
    CallArgs args{s, l};
    stats::OutsideAttempt a{l, kWt, static_cast<uint8_t>(kOp), LOCKSWAP_WT_CALLER(), kRead, kTry, EBUSY};
    int rc = stats::outside_acquire(a, call_inner<kTrySlot>, call_inner<Slot>, &args);
    if constexpr (!std::is_void_v<R>) return rc;
  }
};
using stats::Op;
constexpr auto w_readlock = Acquire<&Table::readlock, Op::rdlock, true>::call;
constexpr auto w_try_readlock = Acquire<&Table::try_readlock, Op::tryrdlock, true>::call;
constexpr auto w_writelock = Acquire<&Table::writelock, Op::wrlock, false>::call;
constexpr auto w_try_writelock = Acquire<&Table::try_writelock, Op::trywrlock, false>::call;

void w_readunlock(Session* s, Rwlock* l) {
  stats::outside_release(l, kWt);  // readers own nothing: only counted
  g_inner.readunlock(s, l);
}
void w_writeunlock(Session* s, Rwlock* l) {
  stats::outside_release(l, kWt);  // closes the write hold
  g_inner.writeunlock(s, l);
}
int w_init(Session* s, Rwlock* l) {
  uintptr_t ip = LOCKSWAP_WT_CALLER();
  int rc = g_inner.init(s, l);
  if (rc == 0) stats::outside_init(l, kWt, ip);
  return rc;
}
void w_destroy(Session* s, Rwlock* l) { g_inner.destroy(s, l); }

Table wrapped(const Table& inner) {
  g_inner = inner;
  return {w_init, w_destroy, w_readlock, w_try_readlock, w_readunlock, w_writelock, w_try_writelock, w_writeunlock};
}

// ------------------------------------------------------- install, dispatch

std::atomic<int> g_install{0};  // 0 not yet, 1 running, 2 done

Table table_for_process() {
  WtlockVariant v = wtlock_variant();
  if (v != WtlockVariant::off && !version_checked()) refuse(nullptr, 0, 0, 0);
  if (v == WtlockVariant::off || v == WtlockVariant::wt) resolve_real();
  if (v == WtlockVariant::off) return g_real;  // WiredTiger's own functions, unwrapped
  Table t = chosen_table(v);
  return stats::outside_ready() ? wrapped(t) : t;
}

// The table the exports jump through.
struct Dispatch {
  static Table ops;
};

void publish(const Table& t) {
  for_each_slot([&](auto slot, const char*) { __atomic_store_n(&(Dispatch::ops.*slot), t.*slot, __ATOMIC_RELEASE); });
}

void install_once() {
  int s = 0;
  if (g_install.compare_exchange_strong(s, 1, std::memory_order_acquire)) {
    publish(table_for_process());
    g_install.store(2, std::memory_order_release);
  }
  while (g_install.load(std::memory_order_acquire) != 2) sched_yield();
}

// First-call stubs: install, then the call again through the table.
template <auto Slot>
struct Stub;
template <class R, R (*Table::*Slot)(Session*, Rwlock*)>
struct Stub<Slot> {
  static R call(Session* s, Rwlock* l) {
    install_once();
    return (Dispatch::ops.*Slot)(s, l);
  }
};

// Constant-initialised: a WiredTiger call before any constructor of ours
// finds the stubs.
Table Dispatch::ops = {Stub<&Table::init>::call,       Stub<&Table::destroy>::call,
                       Stub<&Table::readlock>::call,   Stub<&Table::try_readlock>::call,
                       Stub<&Table::readunlock>::call, Stub<&Table::writelock>::call,
                       Stub<&Table::try_writelock>::call, Stub<&Table::writeunlock>::call};

// Before main when WiredTiger came with the program: a refused version stops
// it here, and no lock call pays for dlsym. Not under off (the default):
// every program would pay for a failed lookup, which allocates its error
// text; off's first WiredTiger call resolves its functions instead.
__attribute__((constructor)) void install_at_start() {
  if (wtlock_variant() != WtlockVariant::off && dlsym(RTLD_DEFAULT, "wiredtiger_version") != nullptr) install_once();
}

}  // namespace

const RealFunctions& real() { return g_real; }

}  // namespace lockswap::wtlock

using lockswap::wtlock::Rwlock;
using lockswap::wtlock::Session;
using Dispatch = lockswap::wtlock::Dispatch;

#define LOCKSWAP_WT_EXPORT extern "C" __attribute__((visibility("default")))

// Each one jump through the table (WiredTiger's own signatures).
LOCKSWAP_WT_EXPORT int __wt_rwlock_init(Session* s, Rwlock* l) { return Dispatch::ops.init(s, l); }
LOCKSWAP_WT_EXPORT void __wt_rwlock_destroy(Session* s, Rwlock* l) { Dispatch::ops.destroy(s, l); }
LOCKSWAP_WT_EXPORT void __wt_readlock(Session* s, Rwlock* l) { Dispatch::ops.readlock(s, l); }
LOCKSWAP_WT_EXPORT int __wt_try_readlock(Session* s, Rwlock* l) { return Dispatch::ops.try_readlock(s, l); }
LOCKSWAP_WT_EXPORT void __wt_readunlock(Session* s, Rwlock* l) { Dispatch::ops.readunlock(s, l); }
LOCKSWAP_WT_EXPORT void __wt_writelock(Session* s, Rwlock* l) { Dispatch::ops.writelock(s, l); }
LOCKSWAP_WT_EXPORT int __wt_try_writelock(Session* s, Rwlock* l) { return Dispatch::ops.try_writelock(s, l); }
LOCKSWAP_WT_EXPORT void __wt_writeunlock(Session* s, Rwlock* l) { Dispatch::ops.writeunlock(s, l); }
