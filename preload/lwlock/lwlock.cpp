// preload/lwlock/lwlock.cpp — PostgreSQL's LWLock API, run on lockswap's
// algorithms (LOCKSWAP_LWLOCK, docs/lwlock.md).
//
// Design
// ------
// redirect.cpp points every function of pg15.h's list here; these
// functions keep what lwlock.c keeps around its algorithm, once for every
// variant: the per-process list of held locks (at most 200, released in any
// order), interrupts held off while any lock is held, the errors PostgreSQL
// raises ("too many LWLocks taken", "lock %s is not held") through its own
// elog, the wait event while waiting, LWLockReleaseAll for the error and
// exit paths. The algorithm is chosen per lock by its tranche: the
// process-wide LOCKSWAP_LWLOCK, or the first `lwlock=VARIANT@tranche:NAME`
// rule of LOCKSWAP_SELECT naming a built-in tranche. Tranche numbers and
// their built-in names are the same in every process of a server, so every
// process runs the same algorithm on the same lock.
//
// PostgreSQL's processes are single-threaded: the held list and the
// per-tranche counters are plain per-process state, as lwlock.c's are.
//
// Statistics (always counted, dumped with LOCKSWAP_STATS): per tranche,
// acquisitions, attempts that did not acquire (a failed conditional
// acquisition, a wait-until-free), the calls that waited and their time
// (a variable wait too), and the hold time of one acquisition in
// stats::kHoldSample.
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "arch/clock.h"
#include "core/percid/thread.h"  // slots_per_lock(): the slots of a percid block, as the thread host sizes them
#include "preload/config/registry.h"
#include "preload/diag.h"
#include "preload/lwlock/lwlock.h"
#include "preload/lwlock/redirect.h"
#include "preload/lwlock/variants.h"
#include "preload/config/select.h"
#include "preload/stats/stats.h"

namespace lockswap::lwlock {

Host g_host;
PercidArea g_percid;
uint32_t g_last_key, g_proc_key;
void* g_keyed_proc;

namespace {

// The side area (docs/lwlock.md, "The side area"): a waiter record of each
// kind per process number, and percid's blocks, in one shared anonymous
// mapping that every process of the server inherits. A process number is
// a PGPROC's index: below TotalProcs = MaxBackends + NUM_AUXILIARY_PROCS +
// max_prepared_xacts (PostgreSQL 15's InitProcGlobal; NUM_AUXILIARY_PROCS
// is 5 in storage/proc.h), each at most MAX_BACKENDS (2^18 - 1), so below
// kMaxProcs, which the rwsem's owner field can name.
constexpr int32_t kMaxProcs = 1 << 20;
static_assert(kMaxProcs <= rwshared::kMaxProcs, "every process number fits the rwsem's owner field");

// Tranche numbers below this get a variant and counters of their own;
// above it (extensions' tranches) the process-wide choice and one shared
// counter row.
constexpr unsigned kTrancheSlots = 256;
constexpr size_t kTrancheRecordBound = 512;  // one lwlock record, worst case (a tranche name is short)

struct Held {
  PgLwlock* lock;
  Mode mode;
  uint64_t since_ns;  // 0 unless this acquisition's hold time is sampled
};
Held g_held[kMaxHeld];
unsigned g_nheld;

LwlockVariant g_default = LwlockVariant::off;
LwlockVariant g_chosen = LwlockVariant::off;  // LOCKSWAP_LWLOCK as set (off with tranche rules: g_default is pg)
LwlockVariant g_variant_of[kTrancheSlots];
bool g_redirected;
const char* g_label = "";

struct TrancheCounters {
  uint64_t acquired, missed, waits, wait_ns, hold_samples, hold_ns;
};
TrancheCounters g_counters[kTrancheSlots + 1];

unsigned slot(uint16_t tranche) { return tranche < kTrancheSlots ? tranche : kTrancheSlots; }
TrancheCounters& counters(const PgLwlock& l) { return g_counters[slot(l.tranche)]; }
LwlockVariant variant_of(const PgLwlock& l) { return l.tranche < kTrancheSlots ? g_variant_of[l.tranche] : g_default; }

// How an entry point reaches its adapter. With one variant for every
// tranche (no tranche rule) the entry points are instantiated for that
// adapter alone (Fixed): no choice on any path. With tranche rules, one
// switch over the registry picks each lock's adapter by its tranche (ByTranche).
template <class Adapter>
struct Fixed {
  template <class Op>
  __attribute__((always_inline)) static decltype(auto) run(const PgLwlock&, Op&& op) {
    return op(Adapter{});
  }
};

struct ByTranche {
  template <class Op>
  __attribute__((always_inline)) static decltype(auto) run(const PgLwlock& l, Op&& op) {
    switch (variant_of(l)) {
#define X(id, name, type, desc) \
  case LwlockVariant::id:       \
    return op(type{});
      LOCKSWAP_LWLOCK_VARIANTS(X)
#undef X
      default:
        return op(LwlockPg{});
    }
  }
};

// A process that may wait needs its record in the side area (made lazily:
// the side area's block below); checked once per PGPROC, before the first
// call that may wait.
void* g_checked_proc;
void check_my_record();
__attribute__((always_inline)) inline void record_for_waiting() {
  if (__builtin_expect(*g_host.my_proc != g_checked_proc, 0)) check_my_record();
}

// The wait accounting around a call that may wait: a call in which the
// variant waited (wait_start) counts as a wait, with its time.
struct WaitAccount {
  const PgLwlock& l;
  uint64_t t0;
  explicit WaitAccount(const PgLwlock& lock) : l(lock), t0(arch::monotonic_ns()) {
    record_for_waiting();
    g_host.waited = false;
  }
  ~WaitAccount() {
    if (!g_host.waited) return;
    TrancheCounters& c = counters(l);
    ++c.waits;
    c.wait_ns += arch::monotonic_ns() - t0;
  }
};

// Bookkeeping shared by every instantiation; fast paths inline, with no
// stack frame; everything rare out of line.
__attribute__((noinline)) uint64_t sample_start() { return arch::monotonic_ns(); }

__attribute__((always_inline)) inline void remember(PgLwlock* l, Mode m) {
  uint64_t n = ++counters(*l).acquired;
  g_held[g_nheld++] = {l, m, __builtin_expect(n % stats::kHoldSample == 0, 0) ? sample_start() : 0};
}

[[noreturn]] __attribute__((noinline)) void too_many() { pg_error(kError, "too many LWLocks taken"); }

__attribute__((always_inline)) inline void room_for_one_more() {
  if (__builtin_expect(g_nheld >= kMaxHeld, 0)) too_many();
}

__attribute__((noinline)) bool conditional_failed(PgLwlock* l) {
  ++counters(*l).missed;
  resume_interrupts();
  return false;
}

[[noreturn]] __attribute__((noinline)) void not_held(PgLwlock* l) {
  pg_error(kError, "lock %s is not held", tranche_name(l->tranche));
}

__attribute__((noinline)) void count_hold(PgLwlock* l, uint64_t since) {
  TrancheCounters& c = counters(*l);
  ++c.hold_samples;
  c.hold_ns += arch::monotonic_ns() - since;
}

// Takes `l` off the held list and returns the entry. RESUME_INTERRUPTS only counts down: no interrupt is
// serviced before the caller's next CHECK_FOR_INTERRUPTS, so it may come
// before the release itself, which then ends in a tail call.
__attribute__((always_inline)) inline Held forget(PgLwlock* l) {
  unsigned i = g_nheld;
  do {
    if (__builtin_expect(i == 0, 0)) not_held(l);
  } while (g_held[--i].lock != l);
  Held h = g_held[i];
  if (__builtin_expect(i + 1 != g_nheld, 0))
    memmove(&g_held[i], &g_held[i + 1], (g_nheld - 1 - i) * sizeof(Held));
  --g_nheld;
  resume_interrupts();
  return h;
}

// ------------------------------------------------------------ the API

bool lw_held_by_me_in_mode(PgLwlock* l, Mode m);

template <class D>
struct Api {
  __attribute__((always_inline)) static bool try_acquire(PgLwlock* l, Mode m) {
    return D::run(*l, [&](auto a) __attribute__((always_inline)) { return a.try_acquire(*l, m); });
  }

  // A process that holds `l` shared and asks for it shared again gets it
  // at once under PostgreSQL's own lock (a shared request waits only for an
  // exclusive holder); a variant whose readers queue behind waiting writers
  // (the rwsem) would make it wait for itself. Such a variant says so with
  // enter_shared_again(); the held list tells a repeat from a first request.
  // Checked only after the fast path failed.
  static bool again_shared(PgLwlock* l, Mode m) {
    if (m != pglw::kShared || !lw_held_by_me_in_mode(l, pglw::kShared)) return false;
    return D::run(*l, [&](auto a) {
      if constexpr (requires { a.enter_shared_again(*l); })
        return a.enter_shared_again(*l);
      else
        return false;
    });
  }

  __attribute__((noinline)) static bool acquire_contended(PgLwlock* l, Mode m) {
    if (again_shared(l, m)) {
      remember(l, m);
      return true;
    }
    bool slept;
    {
      WaitAccount account{*l};
      slept = D::run(*l, [&](auto a) { return a.acquire_slow(*l, m); });
    }
    remember(l, m);
    return !slept;
  }

  static bool acquire(PgLwlock* l, Mode m) {
    room_for_one_more();
    hold_interrupts();
    if (__builtin_expect(!try_acquire(l, m), 0)) return acquire_contended(l, m);
    remember(l, m);
    return true;
  }

  static bool conditional_acquire(PgLwlock* l, Mode m) {
    room_for_one_more();
    hold_interrupts();
    if (__builtin_expect(!try_acquire(l, m), 0) && !again_shared(l, m)) return conditional_failed(l);
    remember(l, m);
    return true;
  }

  static bool acquire_or_wait(PgLwlock* l, Mode m) {
    room_for_one_more();
    hold_interrupts();
    if (!try_acquire(l, m)) {
      bool got;
      {
        WaitAccount account{*l};
        got = D::run(*l, [&](auto a) { return a.acquire_or_wait_slow(*l, m); });
      }
      if (!got) return conditional_failed(l);
    }
    remember(l, m);
    return true;
  }

  static bool wait_for_var(PgLwlock* l, uint64_t* var, uint64_t old, uint64_t* newval) {
    hold_interrupts();
    bool result;
    {
      WaitAccount account{*l};
      result = D::run(*l, [&](auto a) { return a.wait_for_var(*l, var, old, newval); });
    }
    resume_interrupts();
    return result;
  }

  static void update_var(PgLwlock* l, uint64_t* var, uint64_t v) {
    D::run(*l, [&](auto a) { a.update_var(*l, var, v); });
  }

  __attribute__((noinline)) static void release_sampled(PgLwlock* l, Mode m, uint64_t since) {
    D::run(*l, [&](auto a) { a.release(*l, m); });
    count_hold(l, since);
  }

  // The newest lock goes first, usually: popped here, with no frame; any
  // other is found and unlinked out of line.
  static void release(PgLwlock* l) {
    unsigned n = g_nheld;
    if (__builtin_expect(n == 0 || g_held[n - 1].lock != l, 0)) return release_older(l);
    Held h = g_held[n - 1];
    g_nheld = n - 1;
    resume_interrupts();
    release_held(l, h);
  }
  __attribute__((noinline)) static void release_older(PgLwlock* l) { release_held(l, forget(l)); }
  __attribute__((always_inline)) static void release_held(PgLwlock* l, const Held& h) {
    if (__builtin_expect(h.since_ns != 0, 0)) return release_sampled(l, h.mode, h.since_ns);
    D::run(*l, [&](auto a) __attribute__((always_inline)) { a.release(*l, h.mode); });
  }

  static void release_clear_var(PgLwlock* l, uint64_t* var, uint64_t v) {
    D::run(*l, [&](auto a) { a.set_var(*l, var, v); });
    release(l);
  }

  // After an error: InterruptHoldoffCount is as error recovery set it, so
  // each release's resume is matched by a hold here (lwlock.c does the same).
  static void release_all() {
    while (g_nheld > 0) {
      hold_interrupts();
      release(g_held[g_nheld - 1].lock);
    }
  }
};

bool lw_held_by_me(PgLwlock* l) {
  for (unsigned i = 0; i < g_nheld; ++i)
    if (g_held[i].lock == l) return true;
  return false;
}

bool lw_held_by_me_in_mode(PgLwlock* l, Mode m) {
  for (unsigned i = 0; i < g_nheld; ++i)
    if (g_held[i].lock == l && g_held[i].mode == m) return true;
  return false;
}

bool lw_any_held_by_me(PgLwlock* first, int nlocks, size_t stride) {
  auto begin = reinterpret_cast<uintptr_t>(first);
  uintptr_t end = begin + static_cast<uintptr_t>(nlocks) * stride;
  for (unsigned i = 0; i < g_nheld; ++i) {
    auto a = reinterpret_cast<uintptr_t>(g_held[i].lock);
    if (a >= begin && a < end && (a - begin) % stride == 0) return true;
  }
  return false;
}

void lw_for_each_held_by_me(void (*callback)(PgLwlock*, Mode, void*), void* context) {
  for (unsigned i = 0; i < g_nheld; ++i) callback(g_held[i].lock, g_held[i].mode, context);
}

// The replacements of LOCKSWAP_LWLOCK_FUNCTIONS, in its order, for one way
// of reaching the adapters.
template <class D>
struct Replacements {
  using A = Api<D>;
  static constexpr auto lw_acquire = &A::acquire;
  static constexpr auto lw_conditional_acquire = &A::conditional_acquire;
  static constexpr auto lw_acquire_or_wait = &A::acquire_or_wait;
  static constexpr auto lw_wait_for_var = &A::wait_for_var;
  static constexpr auto lw_update_var = &A::update_var;
  static constexpr auto lw_release = &A::release;
  static constexpr auto lw_release_clear_var = &A::release_clear_var;
  static constexpr auto lw_release_all = &A::release_all;
  static constexpr auto lw_held_by_me = &lockswap::lwlock::lw_held_by_me;
  static constexpr auto lw_held_by_me_in_mode = &lockswap::lwlock::lw_held_by_me_in_mode;
  static constexpr auto lw_any_held_by_me = &lockswap::lwlock::lw_any_held_by_me;
  static constexpr auto lw_for_each_held_by_me = &lockswap::lwlock::lw_for_each_held_by_me;
  static void fill(void* (&out)[kRedirected]) {
    unsigned i = 0;
#define FN(name, fn, args) out[i++] = reinterpret_cast<void*>(fn);
    LOCKSWAP_LWLOCK_FUNCTIONS(FN)
#undef FN
  }
};

void fill_replacements(void* (&out)[kRedirected], bool by_tranche) {
  if (by_tranche) return Replacements<ByTranche>::fill(out);
  switch (g_default) {
#define X(id, name, type, desc) \
  case LwlockVariant::id:       \
    return Replacements<Fixed<type>>::fill(out);
    LOCKSWAP_LWLOCK_VARIANTS(X)
#undef X
    default:
      return Replacements<Fixed<LwlockPg>>::fill(out);
  }
}

// ------------------------------------------------------------ start-up

template <class T>
T resolve(const char* name) {
  void* p = dlsym(RTLD_DEFAULT, name);
  if (p == nullptr) {
    diag("lockswap: LOCKSWAP_LWLOCK: this PostgreSQL does not export ");
    diag(name);
    diag("; nothing can be redirected.\n");
    _exit(2);
  }
  return reinterpret_cast<T>(p);
}

void resolve_host(uint32_t pgprocno_offset) {
  g_host.my_proc = resolve<void**>("MyProc");
  g_host.holdoff = resolve<volatile uint32_t*>("InterruptHoldoffCount");
  g_host.wait_event_info = resolve<uint32_t**>("my_wait_event_info");
  g_host.errstart = resolve<bool (*)(int, const char*)>("errstart");
  g_host.errmsg_internal = resolve<int (*)(const char*, ...)>("errmsg_internal");
  g_host.errfinish = resolve<void (*)(const char*, int, const char*)>("errfinish");
  g_host.lwlock_identifier = resolve<const char* (*)(uint32_t, uint16_t)>("GetLWLockIdentifier");
  // Optional: without it every lock of the percid variant runs the rwsem.
  if (void* array = dlsym(RTLD_DEFAULT, "MainLWLockArray")) g_array_ref = static_cast<void* const*>(array);
  g_host.pgprocno_offset = pgprocno_offset;
}

// ------------------------------------------------------------ the side area
//
// Sized by what the run needs, and made only when it needs it: a shared
// anonymous mapping is charged its whole size when it is made, and
// MAP_NORESERVE does not help under vm.overcommit_memory=2, where the kernel
// ignores it (mm/mmap.c; mm/shmem.c's shmem_acct_size). So a run that never
// takes an LWLock (postgres -C, --describe-config) maps nothing, and a
// server maps (MaxBackends + 5 + max_prepared_xacts) x 56 bytes, plus
// percid's blocks where a tranche runs percid. PostgreSQL sets MaxBackends
// (InitializeMaxBackends) before it creates shared memory, so before any
// LWLock exists and before the postmaster forks anything that uses one.
//
// Who needs it: a process that waits or wakes a waiter (the records), and
// percid's fast path (its blocks). So it is made, once, at the first of:
//   - a fork() of a process that has none yet, once MaxBackends is set (the
//     atfork prepare handler, in the parent): the postmaster's first child,
//     which inherits it, as every later one does;
//   - percid's first use of a main-array lock's block (set_up, the rare
//     path): in the postmaster, ShmemIndexLock in CreateSharedMemoryAndSemaphores;
//   - the first call that may wait (the wait accounting, check_my_record)
//     in a process that was not forked from one without it: a standalone
//     backend (bootstrap, single-user), which forks nothing and so shares
//     it with no one.
// The lock paths gain no instruction: the fork hook is outside them,
// percid's is on its once-per-incarnation path, and the record check is in
// the wait accounting, which only calls that may wait reach (it reads the
// clock there already). my_procno, which the rwsem's fast path uses for its
// owner hint, keeps its constant bound: the owner field names any number
// below kMaxProcs, and no record is read for it. A crash restart keeps the
// area (MaxBackends and max_prepared_xacts cannot change without a
// restart). A mapping failure is PostgreSQL's FATAL in the process that
// makes it: the postmaster at start-up, before it forks anything that could
// use an LWLock, or a standalone backend.
struct SideArea {
  const int* max_backends = nullptr;        // MaxBackends
  const int* max_prepared_xacts = nullptr;  // max_prepared_xacts
  bool made = false;
  bool forked_without = false;  // forked from a process that had made none: cannot make one to share
  bool hooked = false;          // the fork handlers are registered
};
SideArea g_side;
// Process numbers 0 .. g_records - 1 have records; 0 until the area is made.
int32_t g_records;

bool any_tranche_runs(LwlockVariant v) {
  if (g_default == v) return true;
  for (LwlockVariant t : g_variant_of)
    if (t == v) return true;
  return false;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Writes n in decimal at `out`; returns the end. For the FATAL's detail,
// without allocating.
char* put_decimal(char* out, uint64_t n) {
  char digits[24];
  int i = 0;
  do digits[i++] = static_cast<char>('0' + n % 10); while ((n /= 10) != 0);
  while (i > 0) *out++ = digits[--i];
  return out;
}

[[noreturn]] __attribute__((noinline)) void side_area_failed(size_t bytes, int64_t procs) {
  int saved = errno;  // for %m; the detail below touches no errno
  static char detail[128];
  char* d = detail;
  d = put_decimal(d, bytes);
  memcpy(d, " bytes for ", 11), d += 11;
  d = put_decimal(d, static_cast<uint64_t>(procs));
  memcpy(d, " process numbers", 17);
  errno = saved;
  pg_error(kFatal, "lockswap: cannot map the LWLock side area (%s): %m; under vm.overcommit_memory=2 see CommitLimit and Committed_AS in /proc/meminfo", detail);
}

__attribute__((noinline)) void make_side_area() {
  if (g_side.made) return;
  if (g_side.forked_without)
    pg_error(kPanic, "lockswap: this process was forked before the LWLock side area was made (MaxBackends was not yet set)%s", "");
  const int64_t procs = int64_t{*g_side.max_backends} + kAuxiliaryProcs + *g_side.max_prepared_xacts;
  if (*g_side.max_backends < 0 || *g_side.max_prepared_xacts < 0 || procs > kMaxProcs)
    pg_error(kFatal, "lockswap: MaxBackends + 5 + max_prepared_xacts is beyond the LWLock side area's bound (2^20 process numbers)%s", "");
  // The records, then percid's blocks on a page of their own (cache-line
  // aligned, as their layout assumes): one per lock of MainLWLockArray once
  // this process knows its length (set_up reads it before it makes the area:
  // the postmaster's first percid lock, so every process of the server
  // inherits or reads the same length), kBlocks if made before that (at a
  // fork): the bound of a block index either way (variants_percid.h).
  const size_t pg_bytes = round_up(static_cast<size_t>(procs) * sizeof(pglw::Waiter), 64);
  const size_t records = round_up(pg_bytes + static_cast<size_t>(procs) * sizeof(rwshared::Waiter), 4096);
  const size_t blocks = g_main_array_locks <= PercidArea::kBlocks ? g_main_array_locks : PercidArea::kBlocks;
  const size_t bytes = records + (any_tranche_runs(LwlockVariant::percid) ? blocks * g_percid.block_bytes : 0);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) side_area_failed(bytes, procs);
  auto* b = static_cast<std::byte*>(p);
  g_host.waiters = {reinterpret_cast<pglw::Waiter*>(b)};
  g_host.rwsem_records = {reinterpret_cast<rwshared::Waiter*>(b + pg_bytes)};
  if (bytes > records) g_percid.base = b + records;
  g_records = static_cast<int32_t>(procs);
  g_side.made = true;
}

void side_area_before_fork() {
  if (!g_side.made && g_redirected && *g_side.max_backends > 0) make_side_area();
}
void side_area_in_child() {
  if (!g_side.made) g_side.forked_without = true;
}

// record_for_waiting's slow part: the postmaster (no PGPROC) is left to the
// variant, which refuses to wait without one (check_may_wait).
__attribute__((noinline)) void check_my_record() {
  void* proc = *g_host.my_proc;
  if (proc == nullptr) return;
  if (!g_side.made) make_side_area();  // PANIC in a process forked before it was made
  int32_t n;
  memcpy(&n, static_cast<char*>(proc) + g_host.pgprocno_offset, sizeof n);
  if (n < 0 || n >= g_records) pg_error(kPanic, "lockswap: process number outside the LWLock waiter records%s", "");
  g_checked_proc = proc;
}

// Before main: what the side area will be sized by, and the fork hook. No
// mapping yet. Idempotent.
void map_side_area() {
  if (g_side.hooked) return;
  g_side.max_backends = resolve<const int*>("MaxBackends");
  g_side.max_prepared_xacts = resolve<const int*>("max_prepared_xacts");
  g_percid.set_slots(percid::slots_per_lock());
  pthread_atfork(side_area_before_fork, nullptr, side_area_in_child);
  g_side.hooked = true;
}

// Built-in tranches: GetLWLockIdentifier names them in every process alike;
// the first number it calls "extension" is the first user-defined one.
void choose_variants() {
  bool used[select::kMaxRules] = {};
  for (unsigned t = 0; t < kTrancheSlots; ++t) {
    g_variant_of[t] = g_default;
    const char* name = tranche_name(static_cast<uint16_t>(t));
    if (name == nullptr || strcmp(name, "extension") == 0) continue;
    int rule = -1;
    if (uint8_t v = select::decide_tranche(name, &rule)) {
      g_variant_of[t] = static_cast<LwlockVariant>(v);
      used[rule] = true;
    }
  }
  for (int r = 0; r < select::rule_count(); ++r)
    if (select::tranche_rule_name(r) != nullptr && !used[r])
      config_error("LOCKSWAP_SELECT", select::rule_text(r), "no built-in LWLock tranche of this PostgreSQL has that name");
}

Verified g_verified;  // what start() checked, kept for redirect()

bool any_tranche_rule() {
  for (int r = 0; r < select::rule_count(); ++r)
    if (select::tranche_rule_name(r) != nullptr) return true;
  return false;
}

}  // namespace

// --------------------------------------------------------- host helpers

[[noreturn]] void pg_error(int level, const char* fmt, const char* arg) {
  if (g_host.errstart(level, nullptr)) {
    g_host.errmsg_internal(fmt, arg);
    g_host.errfinish(__FILE__, __LINE__, "lockswap LWLock");
  }
  abort();  // ERROR and PANIC do not come back
}

void check_may_wait() {
  if (*g_host.my_proc == nullptr) pg_error(kPanic, "cannot wait without a PGPROC structure");
}

int32_t my_procno() {
  check_may_wait();
  int32_t n;
  memcpy(&n, static_cast<char*>(*g_host.my_proc) + g_host.pgprocno_offset, sizeof n);
  if (n < 0 || n >= kMaxProcs) pg_error(kPanic, "lockswap: process number outside the LWLock waiter records%s", "");
  return n;
}

void side_area_ready() {
  if (__builtin_expect(!g_side.made, 0)) make_side_area();
}

namespace {

// ------------------------------------------------ the dump's lwlock records

// " lwlock=LOCKSWAP_LWLOCK" in the dump's first lines: PostgreSQL's LWLocks
// run on lockswap's algorithms.
void dump_heading(stats::Out& o) {
  o.put(" lwlock=");
  o.put(variant_name(g_chosen));
}

size_t dump_bound() { return (kTrancheSlots + 1) * kTrancheRecordBound; }

// One `lwlock` record per tranche used (preload/stats/dump.cpp, "Format");
// dump_bound() keeps room for every one.
void dump_records(stats::Out& o, stats::Tally& t) {
  for (unsigned s = 0; s <= kTrancheSlots; ++s) {
    const TrancheCounters& c = g_counters[s];
    if (c.acquired == 0 && c.waits == 0 && c.missed == 0) continue;
    ++t.written;
    stats::record_start(o, "lwlock");
    o.put(" id=");
    if (s < kTrancheSlots)
      o.dec(s);
    else
      o.put("-1");  // every extension tranche together
    const char* name = s < kTrancheSlots ? tranche_name(static_cast<uint16_t>(s)) : "(extensions)";
    o.put(" tranche=");
    o.escaped(name, strlen(name));
    o.put(" variant=");
    o.put(variant_name(s < kTrancheSlots ? g_variant_of[s] : g_default));
    o.key_dec("acq", c.acquired);
    o.key_dec("missed", c.missed);
    o.key_dec("waits", c.waits);
    o.key_dec("wait_ns", c.wait_ns);
    o.key_dec("hold_samples", c.hold_samples);
    o.key_dec("hold_ns", c.hold_ns);
    o.put("\n");
  }
}

const stats::Section kDumpSection{dump_heading, dump_bound, dump_records, false};

}  // namespace

void start(LwlockVariant chosen) {
  if (chosen == LwlockVariant::off && !any_tranche_rule()) return;
  g_chosen = chosen;
  g_default = chosen == LwlockVariant::off ? LwlockVariant::pg : chosen;
  void* replacement[kRedirected];
  fill_replacements(replacement, any_tranche_rule());
  // Nothing of the program runs, and nothing is mapped for it, before it is
  // verified; everything the replacements need is ready before the first
  // jump is written.
  Verified& v = g_verified;
  if (verify(v) == Found::not_postgres) return;
  map_side_area();
  resolve_host(v.pgprocno_offset);
  choose_variants();
  redirect(v, replacement);
  g_label = v.label;
  g_redirected = true;
  stats::add_section(kDumpSection);
}

bool redirected() { return g_redirected; }
const char* build_label() { return g_label; }

}  // namespace lockswap::lwlock
