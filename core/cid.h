// core/cid.h — dense concurrency ids: the kernel's mm_cid, four ways, in userspace.
//
// Design
// ------
// A concurrency id (cid) is a small integer per thread running lock code, so
// that per-reader state can be sharded into "as many slots as threads run at
// once" instead of one per thread or per possible CPU (core/percid/thread.h is
// the user). The kernel facts it follows are in docs/kernel-algorithms.md §4;
// the contract is the kernel's (§4.1): ids are < kMaxCids, compact toward 0, and two
// threads never hold the same id at once — for `global` and `thread` exactly,
// for `percpu` and `rseq` among threads that are running at the same instant
// (a thread preempted between reading its id and using it may share it, as
// with the kernel's mm_cid read outside an rseq critical section). The percid
// rwlock only needs ids to be small: its slots are counters, so a shared id
// costs a shared cache line, never correctness.
//
// LOCKSWAP_CID selects one allocator for the process (CidMode). Each has a
// file of its own in core/cid/ (global.cpp, percpu.cpp, rseq.cpp,
// thread.cpp); core/cid/common.cpp selects one, runs the switch model and
// resets the state in a fork child.
//
//   global  v6.3 (af7f588d8f73, §4.2): one lock (the cid_lock) and one bitmap.
//           A thread takes the lowest free id, under the lock, the first time
//           it needs one after a sleep in lockswap, and gives it back, under
//           the lock, when it goes to sleep again (WaitCtx's before-sleep
//           hook: the userspace switch-out) or exits. Lock, bitmap and owner
//           pids live in a MAP_SHARED page created before the first fork, so
//           a forking server's children allocate from the same space and
//           contend on the same lock, as the seed's postgres backends did.
//   percpu  v6.4 (223baf9d17f2, §4.3): a per-process array of per-CPU slots,
//           each caching the id last used on that CPU. Fast path: read the CPU
//           (rseq cpu_id), read its slot, done — no lock, no shared write.
//           A slot that is unset or lazily put takes the lowest free id from
//           a private bitmap (lock-free test-and-set; the forward-progress
//           lock only after a lost race, §4.3, allocation). Ids stay cached when
//           threads stop; a periodic scan (every kScanPeriodNs, by whichever
//           thread notices on its kUsesPerClockCheck-th use) frees the ids of
//           CPU slots idle for a whole epoch and asks slots holding an id
//           >= popcount(bitmap) to give theirs back (lazy put) so the ids
//           re-converge toward 0 (§4.3, periodic compaction).
//   rseq    the kernel's own mm_cid, read from the rseq area glibc registered.
//           When the kernel or libc does not provide it (auxv feature size <
//           28, or rseq registration off), the process uses `percpu` instead,
//           counts one cid_fallback event and says so in the statistics.
//   thread  v6.19 per-task mode (§4.4, §4.5): the id of the thread's registry
//           slot (core/thread_registry.h), taken at its first lockswap slow
//           path, kept for life, recycled when the thread exits. Dense over
//           live threads that used lockswap, not over running ones.
//
// percpu slot word (CpuCache::cid), the kernel's encoding:
//   0 .. kMaxCids-1        valid: this CPU's cached id
//   id | kLazyPut          lazy put: a scan asked for the id back; the next
//                          user of the slot frees it and takes the lowest one
//   kUnset (all ones)      no id (recognised before the lazy test)
// Who writes it: a user on that CPU stores valid ids and resolves lazy puts
// (CAS); the scan moves valid -> lazy -> unset (CAS), freeing the bit only if
// its own lazy -> unset CAS won.
//
// Memory order (percpu). The scan must not free an id a thread is using. A
// user stamps its slot with the current epoch (store, seq_cst) before reading
// the id (seq_cst) whenever the stamp is stale; the scan advances the epoch,
// CASes valid -> lazy (seq_cst), then re-reads the stamp: if the slot was used
// in this or the previous epoch it leaves the lazy flag for the user to
// resolve (the kernel's rq->curr Dekker pair, §4.3/§4.5, with "used during
// the last epoch" standing in for "running now"). Either the scan sees the
// fresh stamp or the user sees the lazy flag. Epochs are >= kScanPeriodNs
// apart, so only a thread stalled that long between reading and using its id
// can see it freed under it. Bitmap bits are atomic fetch_or / fetch_and.
//
// global: the cid_lock. The word holds its holder's pid and pid-namespace
// tag (core/spin_guard.h's shared_guard_holder; acquire / release). The
// kernel's cid_lock is a raw spinlock taken with interrupts off, whose
// holder is never stopped, never dies inside and is never preempted;
// userspace has none of that, so the lock deviates:
//   waiting  poll, then yield (the holder may be preempted), then sleep on a
//            futex word in the page (FUTEX_WAIT without the private flag:
//            the page is shared between processes) in slices of
//            kSleepSliceNs, judging the holder at each. A releaser wakes
//            one sleeper when the word says there may be one (a waiter sets
//            it before its last look at the lock, the releaser clears it
//            after freeing the lock: Dekker, seq_cst; one that slept sets
//            it again once it holds the lock, for those still asleep).
//   dead     a relative that died holding it (SIGKILL, OOM killer) is found
//            (kill(pid, 0) says ESRCH, or /proc says zombie; same known pid
//            namespace only) and the lock taken over by a CAS from the word
//            judged.
//   stalled  a holder that is alive but does not let go for
//            kHolderPatienceNs (SIGSTOP, a debugger, a cgroup freezer) is
//            given up on: the acquisition fails, the thread borrows an id
//            (take) or keeps its own (put), and the process says so once on
//            lockswap's stderr (g_say_hook). Later acquisitions that find
//            the same holder give up at once (re-judging it dead at most
//            once per slice), so a stopped relative costs the others no CPU
//            and no wait after the first. Borrowed ids are shared, so the
//            "exactly" of the contract holds only while no holder stalls.
//   signals  a thread inside or waiting for the lock is marked
//            (ThreadCid::in_lock); a signal handler that interrupts it and
//            reaches an allocator slow path (an interposed wait with the
//            switch model, a percid read lock) finds the mark and borrows
//            instead of waiting for its own thread. Signals are not blocked
//            (the kernel's interrupts-off): that would cost two system calls
//            per acquisition. percpu's private forward-progress lock is
//            marked the same way.
// Bitmap and owners are plain (relaxed) accesses under the lock. Recovery is
// safe because every store in the critical sections is a single aligned
// word, and they are ordered so that any prefix is a state the next holder
// accepts. The invariant: a set bit's owner is the pid that took it (alive,
// or dead and reclaimable).
//   take     owner[id] = pid, then set the bit. Killed between: the bit is
//            clear, so the id is free; the stale owner is never read as
//            taken (reclaim and put look only at set bits or their own pid).
//   clear    clear the bit, then owner[id] = 0. Killed between: same state.
//   release_process_ids, reclaim: a loop of clears; killed midway, the ids
//            not yet cleared still name a dead pid and are reclaimed later.
// A dead holder's stores are plain word stores that completed or did not;
// the next holder's CAS on the lock word sees the memory they left.
// Nothing slow runs under the lock: reclaiming the ids of dead processes
// reads bits and owners without it, probes each owner pid once with
// kill(pid, 0) (outside the lock), and then clears batches of up to 64 dead
// ids under the lock, each only if its bit is still set and its owner is
// still the pid found dead.
//
// Who shares the page. Every process forked from the one that attached it
// (select()), until one of them changes credentials (its uid or gid, real,
// effective or saved, differ from those recorded at attach: a server's
// child dropping root). Such a process must not stay able to stop or write
// the page of its more privileged relatives: once it notices (credentials
// are compared at a thread's first global slow path and every
// kSlowPathsPerCredCheck-th after it: two system calls) it gives its ids
// back under the lock and maps a fresh page of its own over the old one
// (MAP_FIXED: a thread of it still inside an operation on the old page
// finds mapped, empty memory), which it and its later children share; ids
// taken from the old page are dropped at put.
// Loaded into a set-id program (AT_SECURE), the page is private
// (MAP_PRIVATE): each process, as in the kernel's per-mm lock, has its own.
// Residual: a thread of a multi-threaded process that changes credentials,
// inside an acquisition at the moment of the move, may leave the old lock
// held under the process's pid (its relatives then give up on it as
// stalled, and take it over once the process has ended).
//
// Fork. The child starts clean: percpu's cache, bitmap and scan state are
// reset; the forking thread forgets its global id without freeing it (the
// parent's thread of the same name still holds it); the child notes its own
// pid and pid namespace for the lock word. A child made by a raw clone()
// runs no atfork handler: it is found at its first global slow path by a
// MADV_WIPEONFORK word (zero in any child; without it, Linux < 4.14, by a
// raw getpid() at each), before it holds the lock or frees an id. The shared
// lock is NOT reset: a parent thread holding it is alive and will release
// it. Ids of a process that exits are freed by its exit handler
// (release_process_ids), and those of one that died without it by the first
// allocation that finds the bitmap full (kill(pid, 0) == ESRCH, or a
// zombie). A pid reused before that keeps its predecessor's ids until it
// dies too; exec() keeps the pid, so a thread that held a global id when its
// process exec()ed leaks it the same way.
//
// Switch model (LOCKSWAP_CID_SWITCH=1, off by default). The kernel does a
// cid's work at the scheduler's switch-out and switch-in whether or not the
// task ever reads its id; with the model on, lockswap does the same at every
// block it sees: every sleep in its own locks (WaitCtx's before- and
// after-sleep hooks) and the waits a server makes between requests
// (preload/blocking_calls.cpp: epoll, poll, select, nanosleep, sigwait).
// switch_out() runs before the thread blocks, switch_in() after it resumes;
// each is one allocator call, per the allocator's semantics:
//   global  switch-out gives the id back and switch-in takes the lowest free
//           one, each under the shared cid_lock (v6.3's mm_cid_put/get in
//           switch_mm_cid), so every process of the tree meets on one lock;
//   percpu  switch-out does nothing (the id stays cached in the CPU slot, the
//           v6.4 lazy scheme) and switch-in reads the slot of the CPU it
//           resumed on;
//   rseq    switch-in reads the kernel's mm_cid (the kernel did the work);
//   thread  switch-in reads the thread's own id (per-task, never given back).
// Neither changes errno. A thread also takes an id when the model is
// switched on and in a fork child (the forking thread), so a thread that
// never blocked holds one too.
//
// Costs and bounds: no malloc anywhere; global maps ~17 KiB once; percpu uses
// kMaxCpus x 64 B of .bss (touched only for CPUs that exist) and a 512 B
// bitmap. CPU time in allocator slow paths is sampled (1 call in
// kSampleEvery timed with CLOCK_THREAD_CPUTIME_ID, scaled) into cid_slow_ns.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "arch/atomic.h"
#include "arch/rseq.h"
#include "core/thread_registry.h"

namespace lockswap {

enum class CidMode : uint8_t { global, percpu, rseq, thread };

namespace cid {

inline constexpr uint32_t kMaxCids = 4096;  // id space: ids are < kMaxCids
inline constexpr uint32_t kBitmapWords = kMaxCids / 64;
inline constexpr uint32_t kMaxCpus = 1024;  // percpu slots (CPU_SETSIZE); beyond: thread ids
// Slot word encoding (see the header).
inline constexpr uint32_t kLazyPut = 1u << 31;
inline constexpr uint32_t kUnset = ~0u;
// Periodic percpu scan: epoch length, and how often a thread looks at the clock.
inline constexpr uint64_t kScanPeriodNs = 100'000'000;  // the kernel's SCHED_MM_CID_PERIOD_NS
inline constexpr uint32_t kUsesPerClockCheck = 1024;
// Slow-path timing: one call in kSampleEvery is timed (thread CPU clock).
inline constexpr uint32_t kSampleEvery = 32;

static_assert(kMaxCids % 64 == 0 && (kMaxCids & (kMaxCids - 1)) == 0, "whole bitmap words; ids fold by mask");
static_assert(kMaxCids <= kLazyPut, "a valid id never has the lazy-put bit");
static_assert((kUnset & kLazyPut) != 0, "unset also reads as not valid");
static_assert(kMaxCpus <= kMaxCids, "every CPU slot can hold its own id");
static_assert((kUsesPerClockCheck & (kUsesPerClockCheck - 1)) == 0 && (kSampleEvery & (kSampleEvery - 1)) == 0);

inline constexpr bool is_valid(uint32_t slot) { return (slot & kLazyPut) == 0; }
inline constexpr bool is_lazy_put(uint32_t slot) { return slot != kUnset && !is_valid(slot); }

// One CPU's cached id and the epoch it was last used in.
struct alignas(64) CpuCache {
  std::atomic<uint32_t> cid{kUnset};
  std::atomic<uint32_t> epoch{0};
};

// Per-thread allocator state (static TLS: never allocates).
struct ThreadCid {
  int32_t global_id;     // global: the id held, -1 = none
  bool global_borrowed;  // global: id space was full, global_id is shared (never freed)
  uint32_t uses;         // percpu: uses since the last clock check; global: slow paths (credential checks)
  uint32_t samples;      // slow-path calls, for 1-in-kSampleEvery timing
  bool switching;        // switch model: inside switch_out/switch_in (a signal handler's wait skips them)
  bool in_lock;          // inside or waiting for an allocator lock (a signal handler's slow path borrows)
  uint32_t global_page;  // global: generation of the page global_id came from
};
extern __thread ThreadCid t_cid __attribute__((tls_model("initial-exec")));

extern std::atomic<CidMode> g_mode;  // effective allocator (after the rseq fallback)
extern CpuCache g_cpu_cache[kMaxCpus];
extern std::atomic<uint32_t> g_epoch;

// Choose the allocator (preload's configuration, or a test between tests):
// single-threaded, before threads use ids. Returns the effective mode.
CidMode select(CidMode requested);
CidMode requested_mode();
inline CidMode mode() { return g_mode.load(arch::mo_hint); }

// Slow paths (core/cid/<allocator>.cpp).
uint32_t global_take();
uint32_t percpu_refill(uint32_t cpu);
uint32_t percpu_stamp(CpuCache& c, uint32_t epoch);
void percpu_clock_check();
uint32_t thread_first_use();
uint32_t borrowed_id();  // cpu beyond kMaxCpus: the thread's id, counted as a fallback

inline uint32_t global_current() {
  int32_t id = t_cid.global_id;
  if (__builtin_expect(id >= 0, 1)) return static_cast<uint32_t>(id);
  return global_take();
}

inline uint32_t percpu_current() {
  auto cpu = static_cast<uint32_t>(arch::current_cpu());
  if (__builtin_expect(cpu >= kMaxCpus, 0)) return borrowed_id();
  CpuCache& c = g_cpu_cache[cpu];
  uint32_t epoch = g_epoch.load(arch::mo_hint);
  uint32_t v = __builtin_expect(c.epoch.load(arch::mo_hint) == epoch, 1) ? c.cid.load(arch::mo_hint)
                                                                          : percpu_stamp(c, epoch);
  if (__builtin_expect(!is_valid(v), 0)) return percpu_refill(cpu);
  if (__builtin_expect((++t_cid.uses & (kUsesPerClockCheck - 1)) == 0, 0)) percpu_clock_check();
  return v;
}

inline uint32_t rseq_current() { return *arch::rseq_mm_cid_word() & (kMaxCids - 1); }

inline uint32_t thread_current() {
  if (ThreadSlot* s = t_local.slot; __builtin_expect(s != nullptr, 1)) return (s->id - 1) & (kMaxCids - 1);
  return thread_first_use();
}

// The calling thread's concurrency id, < kMaxCids. May change between two
// calls (after a sleep, a migration, or a scan); never allocates memory.
// Always inlined: it sits on percid's read fast path, twice per lock pair.
__attribute__((always_inline)) inline uint32_t current() {
  CidMode m = mode();
  if (__builtin_expect(m == CidMode::rseq, 1)) return rseq_current();  // the default first
  if (m == CidMode::thread) return thread_current();
  if (m == CidMode::percpu) return percpu_current();
  return global_current();
}

// Where the allocator says what a user must know (a stalled cid_lock, once
// per process). preload installs its writer to lockswap's private stderr;
// with none installed nothing is said (fd 2 is the host's). Called with no
// lock held; the writer must not allocate.
inline std::atomic<void (*)(const char*, std::size_t)> g_say_hook{nullptr};

// Switch model (see the header): installs switch_out/switch_in as the
// sleep hooks when `on` (after select()); the calling thread takes its id.
void set_switch_model(bool on);
bool switch_model();
void switch_out();  // the calling thread is about to block
void switch_in();   // the calling thread has resumed
// Switch model: adds the process's CPU time so far to cid_switch_cpu_ns (at
// exit, before the statistics are written: the denominator of the share).
void count_process_cpu();

// global: give the calling thread's id back (its sleep or exit hook).
void put_global();
// global: free the ids of processes that died without giving them back (an
// allocation that finds the id space full does this too). Returns how many.
uint32_t reclaim_dead_processes();
// Process exit: free every global id this process still holds.
void release_process_ids();
// In a fork child, single-threaded (preload's atfork handler; tests).
void after_fork_in_child();

// CPUs the kernel may ever bring online (/sys/devices/system/cpu/possible),
// read with plain system calls: glibc's get_nprocs_conf() may fall back to
// opendir(), which allocates, and this runs at configuration time and on a
// lock's first use, possibly inside a malloc's own initialisation.
uint32_t possible_cpus();

// Introspection for tests and statistics.
uint32_t ids_in_use();             // bits set in the active bitmap (global: the shared one)
void percpu_scan();                // the periodic scan, run now
bool rseq_fell_back();             // rseq was asked for but percpu runs

}  // namespace cid
}  // namespace lockswap

// Test-only pause point, called inside the global allocator's cid_lock while
// an id is half taken (its owner written, its bitmap bit not yet). Nothing in
// lockswap defines it: the reference is weak and hidden, so the preload
// library resolves it to null at link time and skips the call. A core unit
// test that defines it can stop a process there and SIGKILL it.
extern "C" void lockswap_test_pause_in_cid_lock() __attribute__((weak, visibility("hidden")));

// Test-only stand-in for getauxval(AT_SECURE) at select() (weak and hidden,
// as above): a core unit test that defines it can attach as a process
// loaded into a set-id program would.
extern "C" int lockswap_test_at_secure() __attribute__((weak, visibility("hidden")));
