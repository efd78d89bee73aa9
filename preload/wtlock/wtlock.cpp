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
//   off          the slots hold WiredTiger's own functions (found for the
//                caller, below, once): WiredTiger as without lockswap, one
//                jump more. Never checks the version.
//   wt           WiredTiger's functions called from the adapter
//                (variants.h), so that the profiler wraps them: the control.
//   rwsem*       the adapter's rwsem on the struct; nothing resolved.
//   profile      (LOCKSWAP_STATS=profile, any variant but off) the slots hold
//                wrappers that time the adapter's functions through
//                preload/stats/stats.h's outside_* calls (try first, then the
//                blocking call, as the rwlock wrappers do).
//   counts       (LOCKSWAP_STATS=counts, any variant but off) the slots hold
//                Counted<adapter>: per-lock counters in a table of this file
//                ("counts mode" below), found by the lock's address. An
//                acquisition is the adapter's first attempt (rwsem: its fast
//                path; wt: WiredTiger's try function) and, only when that
//                failed, the rest of the call, timed: contention and wait.
//                One write hold in 64 per lock is timed. The dump writes
//                them as `wtlock` records (preload/wtlock/wtlock.h,
//                preload/stats/dump.cpp); `lockswap report` shows them in a
//                "WiredTiger rwlocks" section. The pthread families have no
//                per-lock figures in this mode; the LWLock family's
//                per-tranche counters are the model (docs/wtlock.md).
//
// Version check: the layout in variants.h is WiredTiger 3.2's. Every variant
// but off asks the caller's wiredtiger_version() (below) when it installs
// and stops the process with exit status 2 on any other minor version, or on
// a diagnostic build (whose __wt_rwlock_islocked reads the lock word): before
// main when WiredTiger is loaded with the program, else at the first
// interposed call.
//
// Where WiredTiger is found. A WiredTiger dlopen()ed without RTLD_GLOBAL (as
// Python extension modules load libraries) is outside the global scope, the
// only one dlsym(RTLD_NEXT) and dlsym(RTLD_DEFAULT) search from here; its
// PLT calls still bind to these exports, since the global scope comes first
// in its own. So every name is looked up as the calling object's own code
// would have bound it without lockswap: the global scope after lockswap
// first, then that object's local scope (a handle from dlopen(its l_name,
// RTLD_NOLOAD), whose dlsym searches the object and its dependencies; the
// dynamic linker's order, docs/wtlock.md "Where WiredTiger is found"). The
// caller is the return address of the export (a tail jump, or the call shape
// select::caller_ip knows), its object dladdr1(RTLD_DL_LINKMAP)'s. Each
// calling object is resolved once, cold: at the install (the first call), at
// an __wt_rwlock_init or __wt_rwlock_destroy from an object not seen yet
// (their exports look the caller up: a compare or a few), and under routing
// at any call from one. WiredTiger inits every lock before using it, so a
// copy's first call is an init. The handle is kept (never dlclosed): it pins
// the object whose functions the table holds, so that a dlclose() of
// WiredTiger cannot leave the table pointing at unmapped code.
//
// Two copies. Two WiredTigers loaded RTLD_LOCAL from different files each
// call these exports. Under off the second one's first init (a different
// __wt_rwlock_init found for it) switches the table to routing functions
// that pick the calling object's own functions by return address (a scan of
// at most kCallers spans per call): each copy runs its own, as without
// lockswap. Under every other value each copy's version is checked at its
// first init; wt then runs the first copy's functions for both (both are
// the checked 3.2, whose functions act on their arguments alone), the
// swapped variants run their own algorithm for both.
#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "arch/clock.h"
#include "core/nocancel_io.h"
#include "core/spin_guard.h"
#include "preload/config/config.h"
#include "preload/diag.h"
#include "preload/config/registry.h"
#include "preload/config/select.h"
#include "preload/stats/stats.h"
#include "preload/stats/table.h"
#include "preload/wtlock/variants_percid.h"
#include "preload/wtlock/wtlock.h"

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

// ------------------------------------------------------ the calling object

// lockswap's own load address: a symbol found here is one of our exports.
uintptr_t our_base() {
  Dl_info info{};
  return dladdr(reinterpret_cast<void*>(&our_base), &info) != 0 ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0;
}
bool ours(void* p) {
  Dl_info info{};
  return dladdr(p, &info) != 0 && reinterpret_cast<uintptr_t>(info.dli_fbase) == our_base();
}

// `name` as the caller's own code would bind it without lockswap: the global
// scope (`global`: RTLD_NEXT, past lockswap, for the __wt_* names; RTLD_DEFAULT
// for wiredtiger_version, which lockswap does not define), then the caller's
// local scope (`local`: null for the program, whose scope is the global one).
// Never one of our own exports. A failed dlsym allocates its error text:
// cold paths only.
void* find_for(void* local, void* global, const char* name) {
  void* p = dlsym(global, name);
  if (p != nullptr && !ours(p)) return p;
  if (local != nullptr && (p = dlsym(local, name)) != nullptr && !ours(p)) return p;
  return nullptr;
}

// A PT_LOAD span of the object loaded at `base` that contains `ra`: the
// object's whole mapped span (lowest to highest segment).
struct Span {
  uintptr_t ra, base, lo, hi;
};
int span_of(struct dl_phdr_info* info, size_t, void* p) {
  auto* sp = static_cast<Span*>(p);
  if (info->dlpi_addr != sp->base) return 0;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (unsigned i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    lo = std::min<uintptr_t>(lo, info->dlpi_addr + ph.p_vaddr);
    hi = std::max<uintptr_t>(hi, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
  }
  if (sp->ra < lo || sp->ra >= hi) return 0;  // another object at the same bias (the vDSO, the program)
  sp->lo = lo, sp->hi = hi;
  return 1;
}

// One object whose calls reached the exports.
struct Caller {
  uintptr_t lo, hi;   // its mapped span; lo == hi: none (the constructor's install)
  Table real;         // off, wt: the functions its calls reach without lockswap
  VersionFn version;  // every other value: the wiredtiger_version() checked for it
};
constexpr unsigned kCallers = 16;
Caller g_callers[kCallers];
std::atomic<unsigned> g_ncallers{0};      // published entries (release); never removed
std::atomic<uint32_t> g_callers_lock{0};  // adding one (dladdr, dlopen, dlsym: cold)

// The entry whose span holds `ra`; null when the object is new.
__attribute__((always_inline)) inline const Caller* known(uintptr_t ra) {
  unsigned n = g_ncallers.load(std::memory_order_acquire);
  for (unsigned i = 0; i < n; ++i)
    if (ra - g_callers[i].lo < g_callers[i].hi - g_callers[i].lo) return &g_callers[i];
  return nullptr;
}

// The local scope of the object at `ra` (null: the program, lockswap itself,
// or no object), its span written to `c`. The handle keeps one reference on
// the object for good (design block).
void* local_scope_of(uintptr_t ra, Caller& c) {
  Dl_info info{};
  struct link_map* lm = nullptr;
  if (ra == 0 || dladdr1(reinterpret_cast<void*>(ra), &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) == 0 ||
      lm == nullptr)
    return nullptr;
  Span sp{ra, lm->l_addr, 0, 0};
  if (dl_iterate_phdr(span_of, &sp) == 0) return nullptr;  // no span: only the global scope counts
  c.lo = sp.lo, c.hi = sp.hi;
  if (reinterpret_cast<uintptr_t>(info.dli_fbase) == our_base() || lm->l_name == nullptr || lm->l_name[0] == '\0')
    return nullptr;
  void* h = dlopen(lm->l_name, RTLD_LAZY | RTLD_NOLOAD);
  struct link_map* got = nullptr;
  if (h != nullptr && (dlinfo(h, RTLD_DI_LINKMAP, &got) != 0 || got != lm)) {
    dlclose(h);  // a namesake, not the caller (another namespace): trust only the global scope
    h = nullptr;
  }
  return h;
}

// Checks the version of the WiredTiger the caller sees (refusing an
// unchecked one or a diagnostic build); a wiredtiger_version() already
// checked for another caller is not checked again.
VersionFn check_version(void* local) {
  auto fn = reinterpret_cast<VersionFn>(find_for(local, RTLD_DEFAULT, "wiredtiger_version"));
  if (fn == nullptr) refuse(nullptr, 0, 0, 0);
  unsigned n = g_ncallers.load(std::memory_order_relaxed);
  for (unsigned i = 0; i < n; ++i)
    if (g_callers[i].version == fn) return fn;
  int major = -1, minor = -1, patch = -1;
  const char* text = fn(&major, &minor, &patch);
  bool checked = false;
  for (const CheckedVersion& v : kCheckedVersions) checked = checked || (v.major == major && v.minor == minor);
  if (!checked) refuse(text != nullptr ? text : "", major, minor, patch);
  if (find_for(local, RTLD_DEFAULT, "__wt_rwlock_islocked") != nullptr) refuse_diagnostic_build();
  return fn;
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

// The entry of the object at `ra` (0: no caller, the constructor), added
// when new: its version checked (all but off), its WiredTiger functions
// found (off, wt). Exits 2 when they cannot be found or too many objects call.
const Caller& add_caller(uintptr_t ra) {
  SpinGuard g(g_callers_lock);
  if (const Caller* c = known(ra)) return *c;
  unsigned n = g_ncallers.load(std::memory_order_relaxed);
  if (n == kCallers) {
    say("lockswap: LOCKSWAP_WTLOCK: more than 16 objects call WiredTiger's rwlock functions\n");
    _exit(2);
  }
  Caller& c = g_callers[n];
  c = Caller{};
  void* local = local_scope_of(ra, c);
  // Code in no object (or with no span) resolves in the global scope alone,
  // as the constructor's install did: one such entry serves all of it, so
  // that calls from there do not add one each.
  if (c.lo == c.hi)
    for (unsigned i = 0; i < n; ++i)
      if (g_callers[i].lo == g_callers[i].hi) return g_callers[i];
  WtlockVariant v = wtlock_variant();
  if (v != WtlockVariant::off) c.version = check_version(local);
  if (v == WtlockVariant::off || v == WtlockVariant::wt)
    for_each_slot([&](auto slot, const char* name) {
      using Fn = std::remove_reference_t<decltype(c.real.*slot)>;
      auto fn = reinterpret_cast<Fn>(find_for(local, RTLD_NEXT, name));
      if (fn == nullptr) {
        say("lockswap: LOCKSWAP_WTLOCK: cannot find WiredTiger's ");
        say(name);
        say(" for its caller, neither in the global scope after lockswap nor in the caller's own\n");
        _exit(2);
      }
      c.real.*slot = fn;
    });
  g_ncallers.store(n + 1, std::memory_order_release);
  return c;
}

Table g_real;  // the functions of the first caller (real(): WtlockWt's)

// ------------------------------------------------------------- the tables

template <class A>
constexpr Table table_of() {
  return {A::init, A::destroy, A::readlock, A::try_readlock, A::readunlock, A::writelock, A::try_writelock,
          A::writeunlock};
}

template <class A>
struct Adapter {
  using type = A;
};
// `make(Adapter<the variant's adapter>{})`: a table of that adapter.
template <class Make>
Table chosen_table(WtlockVariant v, Make&& make) {
  switch (v) {
#define X(id, name, type, desc) \
  case WtlockVariant::id:       \
    return make(Adapter<type>{});
    LOCKSWAP_WTLOCK_VARIANTS(X)
#undef X
    default:
      return make(Adapter<WtlockOff>{});
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
// (itself, for the try calls), as the rwlock wrappers of preload/stats/stats.cpp do.
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

// ------------------------------------------------------------- counts mode
//
// LOCKSWAP_STATS=counts: one entry per lock in a fixed table mapped at
// install (kCountSlots, open-addressed by the lock's address, an entry never
// freed or moved), found from the lock's home slot without any thread-local
// cache; nothing allocates. Per lock: read and write acquisitions
// (successful try calls included), contended ones (the first attempt
// failed), the time in the rest of a contended call, and the hold of one
// write acquisition in stats::kHoldSample (the sampling of the LWLock family's
// counts, preload/lwlock/lwlock.cpp), its start kept by the writing thread
// (WiredTiger's writer unlocks what it locked); reads have no hold time, as
// in the profiler. Entries are updated after the acquisition: readers
// atomically, a writer, holding the lock, with plain stores
// (preload/stats/table.h's rule).

constexpr unsigned kCountBits = 14;
constexpr uint32_t kCountSlots = 1u << kCountBits;
constexpr uint32_t kCountProbes = 64;

// One lock's counters; an idle pair touches the first cache line only.
struct alignas(64) LockCounts {
  std::atomic<uintptr_t> addr{0};  // the key; 0: free (claimed by CAS)
  stats::Counter rd_acq{0}, wr_acq{0};
  stats::Counter rd_contended{0}, wr_contended{0}, wait_ns{0}, wait_max_ns{0};
  stats::Counter hold_samples{0}, hold_ns{0};
  std::atomic<uintptr_t> first_ip{0};
};
static_assert(sizeof(LockCounts) == 128);

LockCounts* g_counts;  // mapped by table_for_process under counts; else null

// This thread's sampled write hold (the writer unlocks what it locked):
// the write unlock tests one thread-local word and looks nothing up.
struct SampledHold {
  LockCounts* e;
  uint64_t start;
};
__thread SampledHold t_hold __attribute__((tls_model("initial-exec")));

uint32_t home(uintptr_t key) { return static_cast<uint32_t>((key * 0x9e3779b97f4a7c15ull) >> (64 - kCountBits)); }

// The entry of `key` past its home slot, a free slot claimed for it
// (first_ip: `ip`). Null when the probe window is full (counted as the
// profiler's stats_lock_untracked).
__attribute__((noinline)) LockCounts* probe(uintptr_t key, uintptr_t ip) {
  for (uint32_t n = 0, i = home(key); n < kCountProbes; ++n, i = (i + 1) & (kCountSlots - 1)) {
    LockCounts& e = g_counts[i];
    uintptr_t at = e.addr.load(std::memory_order_relaxed);
    if (at == 0 && e.addr.compare_exchange_strong(at, key, std::memory_order_relaxed)) {
      e.first_ip.store(ip, std::memory_order_relaxed);
      return &e;
    }
    if (at == key) return &e;
  }
  lockevent_inc(LockEvent::stats_lock_untracked);
  return nullptr;
}

// `f(entry)` for the lock `l`, found at its home slot or by probe().
template <class F>
__attribute__((always_inline)) inline void with_counts(Rwlock* l, void* ra, F&& f) {
  auto key = reinterpret_cast<uintptr_t>(l);
  LockCounts& e = g_counts[home(key)];
  if (__builtin_expect(e.addr.load(std::memory_order_relaxed) == key, 1)) return f(e);
  if (LockCounts* p = probe(key, reinterpret_cast<uintptr_t>(ra))) f(*p);
}

__attribute__((noinline)) void begin_hold(LockCounts& e) { t_hold = {&e, arch::monotonic_ns()}; }
// At a write unlock while this thread has a sampled hold: closes it when it
// is this lock's (the writer holds it: plain stores).
__attribute__((noinline)) void end_hold(Rwlock* l) {
  LockCounts* e = t_hold.e;
  if (e->addr.load(std::memory_order_relaxed) != reinterpret_cast<uintptr_t>(l)) return;
  constexpr auto x = stats::Access::exclusive;
  stats::bump(e->hold_ns, arch::monotonic_ns() - t_hold.start, x);
  stats::bump(e->hold_samples, 1, x);
  t_hold.e = nullptr;
}
// A write acquisition, by the holder.
__attribute__((always_inline)) inline void wrote(LockCounts& e) {
  uint64_t n = e.wr_acq.load(std::memory_order_relaxed) + 1;
  e.wr_acq.store(n, std::memory_order_relaxed);
  if (__builtin_expect(n % stats::kHoldSample == 0, 0)) begin_hold(e);
}
void read_once(LockCounts& e) { e.rd_acq.fetch_add(1, std::memory_order_relaxed); }

// The adapter `A` with its acquisitions counted; the unlocks of readers and
// destroy are A's own (nothing to count).
template <class A>
struct Counted {
  static int init(Session* s, Rwlock* l) {
    uintptr_t ip = LOCKSWAP_WT_CALLER();
    int rc = A::init(s, l);
    // Initialised again (memory reused): the lock's site is the new one.
    if (rc == 0)
      if (LockCounts* e = probe(reinterpret_cast<uintptr_t>(l), ip)) e->first_ip.store(ip, std::memory_order_relaxed);
    return rc;
  }
  static void readlock(Session* s, Rwlock* l) {
    uint64_t c = 0;  // the rwsem count read_first saw; wt does not set it (nor read it)
    if (__builtin_expect(A::read_first(s, l, c), 1)) return with_counts(l, __builtin_return_address(0), read_once);
    read_contended(s, l, c, __builtin_return_address(0));
  }
  static int try_readlock(Session* s, Rwlock* l) {
    int rc = A::try_readlock(s, l);
    if (rc == 0) with_counts(l, __builtin_return_address(0), read_once);
    return rc;
  }
  static void writelock(Session* s, Rwlock* l) {
    if (__builtin_expect(A::write_first(s, l), 1)) return with_counts(l, __builtin_return_address(0), wrote);
    write_contended(s, l, __builtin_return_address(0));
  }
  static int try_writelock(Session* s, Rwlock* l) {
    int rc = A::try_writelock(s, l);
    if (rc == 0) with_counts(l, __builtin_return_address(0), wrote);
    return rc;
  }
  static void writeunlock(Session* s, Rwlock* l) {
    if (__builtin_expect(t_hold.e != nullptr, 0)) end_hold(l);
    A::writeunlock(s, l);
  }

 private:
  // The rest of a call whose first attempt failed, timed.
  __attribute__((noinline)) static void read_contended(Session* s, Rwlock* l, uint64_t c, void* ra) {
    uint64_t t0 = arch::monotonic_ns();
    A::read_rest(s, l, c);
    uint64_t waited = arch::monotonic_ns() - t0;
    with_counts(l, ra, [waited](LockCounts& e) {
      constexpr auto sh = stats::Access::shared;
      stats::bump(e.rd_acq, 1, sh);
      stats::bump(e.rd_contended, 1, sh);
      stats::bump(e.wait_ns, waited, sh);
      stats::raise_to(e.wait_max_ns, waited, sh);
    });
  }
  __attribute__((noinline)) static void write_contended(Session* s, Rwlock* l, void* ra) {
    uint64_t t0 = arch::monotonic_ns();
    A::write_rest(s, l);
    uint64_t waited = arch::monotonic_ns() - t0;
    with_counts(l, ra, [waited](LockCounts& e) {
      constexpr auto x = stats::Access::exclusive;  // held now: no reader is inside
      stats::bump(e.wr_contended, 1, x);
      stats::bump(e.wait_ns, waited, x);
      stats::raise_to(e.wait_max_ns, waited, x);
      wrote(e);
    });
  }
};

template <class A>
constexpr Table counted_table_of() {
  using C = Counted<A>;
  return {C::init, A::destroy, C::readlock, C::try_readlock, A::readunlock, C::writelock, C::try_writelock,
          C::writeunlock};
}

// ------------------------------------------------- the dump's wtlock records

struct LockRow {
  uintptr_t addr;        // the WT_RWLOCK
  uintptr_t first_ip;    // where it was initialised, else first taken (0: unknown)
  uint64_t acq, rd_acq;  // acquisitions (try calls that succeeded too), of them reads
  uint64_t contended, rd_contended;  // the first attempt failed, the call went on
  uint64_t wait_ns, wait_max_ns;     // time in the rest of a contended call
  uint64_t hold_samples, hold_ns;    // write holds, 1 in kHoldSample per lock
};

// Each lock with a counted acquisition, in table order; async-signal-safe
// (relaxed loads only).
template <class Visit>
void for_each_counted_lock(Visit&& visit) {
  const LockCounts* t = g_counts;
  if (t == nullptr) return;
  auto get = [](const stats::Counter& c) { return c.load(std::memory_order_relaxed); };
  for (uint32_t i = 0; i < kCountSlots; ++i) {
    const LockCounts& e = t[i];
    uintptr_t addr = e.addr.load(std::memory_order_relaxed);
    uint64_t rd = get(e.rd_acq), wr = get(e.wr_acq);
    if (addr == 0 || rd + wr == 0) continue;  // initialised, never taken
    visit(LockRow{addr, e.first_ip.load(std::memory_order_relaxed), rd + wr, rd,
                  get(e.rd_contended) + get(e.wr_contended), get(e.rd_contended), get(e.wait_ns),
                  get(e.wait_max_ns), get(e.hold_samples), get(e.hold_ns)});
  }
}

size_t dump_bound() {
  size_t n = 0;
  for_each_counted_lock([&](const LockRow&) { ++n; });
  return n * stats::kRecordBound;
}

// One `wtlock` record per counted lock (preload/stats/dump.cpp, "Format").
void dump_records(stats::Out& o, stats::Tally& t) {
  const char* variant = variant_name(wtlock_variant());
  for_each_counted_lock([&](const LockRow& r) {
    if (!stats::room(o)) return void(++t.unwritten);
    ++t.written;
    stats::record_start(o, "wtlock");
    o.key_hex("addr", r.addr);
    o.put(" kind=wtlock variant=");
    o.put(variant);
    if (r.first_ip != 0) o.key_hex("first_ip", r.first_ip);
    o.key_dec("acq", r.acq);
    o.key_dec("rd_acq", r.rd_acq);
    o.key_dec("contended", r.contended);
    o.key_dec("rd_contended", r.rd_contended);
    o.key_dec("wait_ns", r.wait_ns);
    o.key_dec("wait_max_ns", r.wait_max_ns);
    o.key_dec("hold_samples", r.hold_samples);
    o.key_dec("hold_ns", r.hold_ns);
    o.put("\n");
  });
}

const stats::Section kDumpSection{nullptr, dump_bound, dump_records, true};

// The counting table, once (install_once runs this once per process).
bool map_counts() {
  void* p = mmap(nullptr, sizeof(LockCounts) * kCountSlots, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    say("lockswap: LOCKSWAP_WTLOCK: cannot map the per-lock counters; WiredTiger's locks are not counted\n");
    return false;
  }
  g_counts = static_cast<LockCounts*>(p);  // zero pages are free entries
  stats::add_section(kDumpSection);
  return true;
}

// ------------------------------------------------------- install, dispatch

std::atomic<int> g_install{0};  // 0 not yet, 1 running, 2 done

// `caller`: the object the first call came from (0: the constructor).
Table table_for_process(uintptr_t caller) {
  WtlockVariant v = wtlock_variant();
  const Caller& c = add_caller(caller);  // its version checked (all but off), its functions found (off, wt)
  if (v == WtlockVariant::off || v == WtlockVariant::wt) g_real = c.real;
  if (v == WtlockVariant::off) return g_real;  // WiredTiger's own functions, unwrapped
  auto plain = [](auto a) { return table_of<typename decltype(a)::type>(); };
  if (stats::outside_ready()) return wrapped(chosen_table(v, plain));
  if (g_config.stats_mode == StatsMode::counts && map_counts())
    return chosen_table(v, [](auto a) { return counted_table_of<typename decltype(a)::type>(); });
  return chosen_table(v, plain);
}

// The table the exports jump through.
struct Dispatch {
  static Table ops;
};

void publish(const Table& t) {
  for_each_slot([&](auto slot, const char*) { __atomic_store_n(&(Dispatch::ops.*slot), t.*slot, __ATOMIC_RELEASE); });
}

void install_once(uintptr_t caller) {
  if (__builtin_expect(g_install.load(std::memory_order_acquire) == 2, 1)) return;
  int s = 0;
  if (g_install.compare_exchange_strong(s, 1, std::memory_order_acquire)) {
    publish(table_for_process(caller));
    g_install.store(2, std::memory_order_release);
  }
  while (g_install.load(std::memory_order_acquire) != 2) sched_yield();
}

// First-call stubs: install (for the calling object), then the call again
// through the table.
template <auto Slot>
struct Stub;
template <class R, R (*Table::*Slot)(Session*, Rwlock*)>
struct Stub<Slot> {
  static R call(Session* s, Rwlock* l) {
    install_once(LOCKSWAP_WT_CALLER());
    return (Dispatch::ops.*Slot)(s, l);
  }
};

// Routing (off, two WiredTigers of different files): each call runs the
// calling object's own function; an object not seen yet is added first.
template <auto Slot>
struct Route;
template <class R, R (*Table::*Slot)(Session*, Rwlock*)>
struct Route<Slot> {
  static R call(Session* s, Rwlock* l) {
    uintptr_t ra = LOCKSWAP_WT_CALLER();
    const Caller* c = known(ra);
    if (__builtin_expect(c == nullptr, 0)) c = &add_caller(ra);
    return (c->real.*Slot)(s, l);
  }
};
std::atomic<bool> g_routing{false};

// Constant-initialised: a WiredTiger call before any constructor of ours
// finds the stubs.
Table Dispatch::ops = {Stub<&Table::init>::call,       Stub<&Table::destroy>::call,
                       Stub<&Table::readlock>::call,   Stub<&Table::try_readlock>::call,
                       Stub<&Table::readunlock>::call, Stub<&Table::writelock>::call,
                       Stub<&Table::try_writelock>::call, Stub<&Table::writeunlock>::call};

// An init or destroy from an object not seen yet: its version checked (all
// but off); under off, when its WiredTiger is not the first caller's, the
// table turns to routing for good. Its earlier calls (none: WiredTiger inits
// a lock before it takes it) went to the first caller's functions.
__attribute__((noinline)) void new_caller(uintptr_t ra) {
  const Caller& c = add_caller(ra);
  if (wtlock_variant() != WtlockVariant::off || c.real.init == g_real.init) return;
  if (g_routing.exchange(true, std::memory_order_acq_rel)) return;
  publish({Route<&Table::init>::call, Route<&Table::destroy>::call, Route<&Table::readlock>::call,
           Route<&Table::try_readlock>::call, Route<&Table::readunlock>::call, Route<&Table::writelock>::call,
           Route<&Table::try_writelock>::call, Route<&Table::writeunlock>::call});
}

// Before main when WiredTiger came with the program: a refused version stops
// it here, and no lock call pays for dlsym. Not under off (the default):
// every program would pay for a failed lookup, which allocates its error
// text; off's first WiredTiger call resolves its functions instead.
__attribute__((constructor)) void install_at_start() {
  if (wtlock_variant() != WtlockVariant::off && dlsym(RTLD_DEFAULT, "wiredtiger_version") != nullptr) install_once(0);
}

}  // namespace

const RealFunctions& real() { return g_real; }

// The exports of init and destroy (cold: once per lock) see each calling
// object: the first call installs for it, a new one is added (design block).
void note_caller(void* ra) {
  auto r = reinterpret_cast<uintptr_t>(ra);
  install_once(r);
  if (__builtin_expect(known(r) == nullptr, 0)) new_caller(r);
}

void after_fork_in_child() {
  g_callers_lock.store(0, std::memory_order_relaxed);  // a thread that did not survive may have held it
#define X(id, name, type, desc) adapter_after_fork_in_child<type>();
  LOCKSWAP_WTLOCK_VARIANTS(X)
#undef X
}

}  // namespace lockswap::wtlock

using lockswap::wtlock::Rwlock;
using lockswap::wtlock::Session;
using Dispatch = lockswap::wtlock::Dispatch;

#define LOCKSWAP_WT_EXPORT extern "C" __attribute__((visibility("default")))

// Each one jump through the table (WiredTiger's own signatures).
// Init and destroy first note their caller (a new WiredTiger, docs/wtlock.md).
LOCKSWAP_WT_EXPORT int __wt_rwlock_init(Session* s, Rwlock* l) {
  lockswap::wtlock::note_caller(__builtin_return_address(0));
  return Dispatch::ops.init(s, l);
}
LOCKSWAP_WT_EXPORT void __wt_rwlock_destroy(Session* s, Rwlock* l) {
  lockswap::wtlock::note_caller(__builtin_return_address(0));
  Dispatch::ops.destroy(s, l);
}
LOCKSWAP_WT_EXPORT void __wt_readlock(Session* s, Rwlock* l) { Dispatch::ops.readlock(s, l); }
LOCKSWAP_WT_EXPORT int __wt_try_readlock(Session* s, Rwlock* l) { return Dispatch::ops.try_readlock(s, l); }
LOCKSWAP_WT_EXPORT void __wt_readunlock(Session* s, Rwlock* l) { Dispatch::ops.readunlock(s, l); }
LOCKSWAP_WT_EXPORT void __wt_writelock(Session* s, Rwlock* l) { Dispatch::ops.writelock(s, l); }
LOCKSWAP_WT_EXPORT int __wt_try_writelock(Session* s, Rwlock* l) { return Dispatch::ops.try_writelock(s, l); }
LOCKSWAP_WT_EXPORT void __wt_writeunlock(Session* s, Rwlock* l) { Dispatch::ops.writeunlock(s, l); }
