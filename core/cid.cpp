// core/cid.cpp — concurrency id allocators (design: core/cid.h).
#include "core/cid.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "arch/clock.h"
#include "arch/relax.h"
#include "core/cancel.h"
#include "core/nocancel_io.h"
#include "core/spin_guard.h"
#include "core/wait_ctx.h"

namespace lockswap {
namespace cid {

__thread ThreadCid t_cid __attribute__((tls_model("initial-exec"))) = {-1, false, 0, 0, false};
std::atomic<CidMode> g_mode{CidMode::thread};
CpuCache g_cpu_cache[kMaxCpus];
std::atomic<uint32_t> g_epoch{0};

namespace {

CidMode g_requested = CidMode::thread;
bool g_rseq_fell_back = false;
int32_t g_pid = 0;       // this process (getpid() is a system call on current glibc)
uint64_t g_guard_self = 0;  // g_pid and its pid namespace, as the shared cid_lock's holder
uint32_t g_ncpus = 1;    // CPU slots the percpu scan walks

uint64_t now_ns() { return arch::monotonic_ns(); }
uint64_t thread_cpu_ns() { return arch::clock_ns(CLOCK_THREAD_CPUTIME_ID); }

// What two back-to-back thread_cpu_ns() calls measure: the clock's own
// cost, subtracted from every sample (the fastest of a few tries).
uint64_t g_clock_cost_ns = 0;
void calibrate_clock() {
  uint64_t best = ~uint64_t{0};
  for (int i = 0; i < 8; ++i) {
    uint64_t a = thread_cpu_ns(), b = thread_cpu_ns();
    if (b - a < best) best = b - a;
  }
  g_clock_cost_ns = best;
}

// Times one slow-path call in kSampleEvery (per thread) and adds it, scaled,
// to cid_slow_ns. CPU time of the calling thread, not wall time: a thread
// preempted inside the allocator (common with many threads per CPU) would
// otherwise count the time others ran, and the question is what the
// allocator costs the machine (the seed's "43% of cycles"). The thread CPU
// clock is a system call, hence the sampling and the calibration.
class SlowPathTimer {
 public:
  SlowPathTimer() {
    if ((++t_cid.samples & (kSampleEvery - 1)) == 0) start_ = thread_cpu_ns();
  }
  ~SlowPathTimer() {
    if (start_ == 0) return;
    uint64_t spent = thread_cpu_ns() - start_;
    spent = spent > g_clock_cost_ns ? spent - g_clock_cost_ns : 0;
    lockevent_add(LockEvent::cid_slow_ns, spent * kSampleEvery);
  }
  SlowPathTimer(const SlowPathTimer&) = delete;
  SlowPathTimer& operator=(const SlowPathTimer&) = delete;

 private:
  uint64_t start_ = 0;
};

void count_if_contended(const SpinGuard& g) {
  if (g.contended()) lockevent_inc(LockEvent::cid_lock_contended);
}

// A tag of this process's pid namespace for SharedSpinGuard (0 = unknown:
// then a dead holder of the shared lock is never taken over). A plain
// system call: this runs at configuration time and in a fork child.
uint32_t pid_namespace_tag() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint32_t>(st.st_ino);
}

void note_own_pid() {
  g_pid = static_cast<int32_t>(getpid());
  g_guard_self = shared_guard_holder(g_pid, pid_namespace_tag());
}

// ------------------------------------------------------------------ bitmaps

using Bitmap = std::atomic<uint64_t>[kBitmapWords];

uint64_t bit_of(uint32_t id) { return 1ull << (id % 64); }

// Lowest clear bit, or kMaxCids when every bit is set.
uint32_t first_zero(const Bitmap& bits) {
  for (uint32_t w = 0; w < kBitmapWords; ++w) {
    uint64_t free_bits = ~bits[w].load(arch::mo_hint);
    if (free_bits != 0) return w * 64 + static_cast<uint32_t>(__builtin_ctzll(free_bits));
  }
  return kMaxCids;
}

uint32_t popcount(const Bitmap& bits) {
  uint32_t n = 0;
  for (const auto& w : bits) n += static_cast<uint32_t>(__builtin_popcountll(w.load(arch::mo_hint)));
  return n;
}

// --------------------------------------------------------- global (v6.3)

// The v6.3 per-mm state, in a page every forked child shares.
struct SharedIds {
  alignas(64) std::atomic<uint64_t> lock;  // the cid_lock: 0 or its holder (SharedSpinGuard)
  alignas(64) Bitmap bits;                 // under lock
  std::atomic<int32_t> owner[kMaxCids];    // pid holding each id, under lock
};
SharedIds* g_shared = nullptr;  // mapped once, before any fork, by select()

bool map_shared_ids() {
  if (g_shared != nullptr) return true;
  void* p = mmap(nullptr, sizeof(SharedIds), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  g_shared = static_cast<SharedIds*>(p);  // zero-filled: unlocked, no id taken
  return true;
}

// The shared cid_lock; its holder may be another process of the tree.
class CidLock : public SharedSpinGuard {
 public:
  CidLock() : SharedSpinGuard(g_shared->lock, g_guard_self) {
    if (contended()) lockevent_inc(LockEvent::cid_lock_contended);
    if (recovered()) lockevent_inc(LockEvent::cid_lock_recovered);
  }
};

bool is_taken(uint32_t id) { return (g_shared->bits[id / 64].load(arch::mo_hint) & bit_of(id)) != 0; }

// __mm_cid_get(): the lowest free id, or -1 (lock held; plain accesses).
// The owner is written before the bit and cleared after it, so a holder
// killed between the two leaves a free id with a stale owner, which nothing
// reads as taken (core/cid.h, "global").
int32_t take_lowest_locked() {
  uint32_t id = first_zero(g_shared->bits);
  if (id >= kMaxCids) return -1;
  g_shared->owner[id].store(g_pid, arch::mo_hint);
  if (lockswap_test_pause_in_cid_lock) lockswap_test_pause_in_cid_lock();
  auto& word = g_shared->bits[id / 64];
  word.store(word.load(arch::mo_hint) | bit_of(id), arch::mo_hint);
  return static_cast<int32_t>(id);
}

void clear_locked(uint32_t id) {
  auto& word = g_shared->bits[id / 64];
  word.store(word.load(arch::mo_hint) & ~bit_of(id), arch::mo_hint);
  g_shared->owner[id].store(0, arch::mo_hint);
}

// A taken id whose owner process is gone (found without the lock).
struct DeadOwner {
  uint32_t id;
  int32_t pid;
};
inline constexpr uint32_t kReclaimBatch = 64;

// Frees the batch under the lock, each id only if it still belongs to the
// pid found dead (another reclaimer may have freed it, and it may be taken
// again since).
uint32_t clear_dead_batch(const DeadOwner* dead, uint32_t n) {
  if (n == 0) return 0;
  uint32_t freed = 0;
  CidLock g;
  for (uint32_t i = 0; i < n; ++i)
    if (is_taken(dead[i].id) && g_shared->owner[dead[i].id].load(arch::mo_hint) == dead[i].pid) {
      clear_locked(dead[i].id);
      ++freed;
    }
  return freed;
}

// Remembers the last pid asked about: a process's ids are usually many.
class ProcessGone {
 public:
  bool operator()(int32_t pid) {
    if (pid != last_pid_) {
      last_pid_ = pid;
      last_gone_ = process_has_ended(pid);
    }
    return last_gone_;
  }

 private:
  int32_t last_pid_ = 0;
  bool last_gone_ = false;
};

// Frees the ids of processes that died without their exit handler. The
// kill(2) probes run outside the cid_lock (a relaxed read of bits and owners
// may be stale: clear_dead_batch re-checks under the lock); the lock is taken
// once per kReclaimBatch dead ids.
uint32_t reclaim_dead_owners() {
  DeadOwner dead[kReclaimBatch];
  uint32_t n = 0, freed = 0;
  ProcessGone gone;
  for (uint32_t id = 0; id < kMaxCids; ++id) {
    int32_t pid = g_shared->owner[id].load(arch::mo_hint);
    if (pid == 0 || pid == g_pid || !is_taken(id) || !gone(pid)) continue;
    dead[n++] = {id, pid};
    if (n == kReclaimBatch) {
      freed += clear_dead_batch(dead, n);
      n = 0;
    }
  }
  return freed + clear_dead_batch(dead, n);
}

// ---------------------------------------------------------- percpu (v6.4)

// The per-process bitmap and its forward-progress lock (docs/kernel-algorithms.md §4.3: cid_lock and
// use_cid_lock), plus the scan clock.
struct PrivateIds {
  Bitmap bits;
  alignas(64) std::atomic<uint32_t> lock;
  std::atomic<uint32_t> use_lock;          // allocations serialise on `lock` while set
  std::atomic<uint64_t> next_scan_ns;
};
PrivateIds g_private;

enum class Got : uint8_t { id, raced, full };

// One lock-free attempt at the lowest free id (mm_cid_try_get()).
Got try_get(uint32_t& id) {
  id = first_zero(g_private.bits);
  if (id >= kMaxCids) return Got::full;
  uint64_t bit = bit_of(id);
  return (g_private.bits[id / 64].fetch_or(bit, arch::mo_handover) & bit) ? Got::raced : Got::id;
}

// __mm_cid_get(): lock-free first; after a lost race, newcomers queue on the
// lock and the holder retries until it wins. kMaxCids when the space is full.
uint32_t alloc_lowest() {
  uint32_t id;
  if (g_private.use_lock.load(arch::mo_hint) == 0) {
    Got got = try_get(id);
    if (got != Got::raced) return got == Got::id ? id : kMaxCids;
  }
  SpinGuard g(g_private.lock);
  count_if_contended(g);
  g_private.use_lock.store(1, arch::mo_hint);
  Got got;
  while ((got = try_get(id)) == Got::raced) arch::cpu_relax();
  g_private.use_lock.store(0, arch::mo_hint);
  return got == Got::id ? id : kMaxCids;
}

void free_private(uint32_t id) { g_private.bits[id / 64].fetch_and(~bit_of(id), arch::mo_handover); }

// A user met the lazy-put flag: it frees the id (if its CAS wins) and will
// take the lowest free one.
void drop_lazy(CpuCache& c, uint32_t lazy) {
  if (!c.cid.compare_exchange_strong(lazy, kUnset, arch::mo_dekker)) return;
  free_private(lazy & ~kLazyPut);
  lockevent_inc(LockEvent::cid_reclaim);
}

bool used_recently(const CpuCache& c, uint32_t epoch) { return epoch - c.epoch.load(arch::mo_dekker) < 2; }

// sched_mm_cid_remote_clear(): valid -> lazy, then back off if the slot was
// used recently (its user resolves the flag), else lazy -> unset and free.
void remote_clear(CpuCache& c, uint32_t epoch) {
  uint32_t v = c.cid.load(arch::mo_dekker);
  if (!is_valid(v) || !c.cid.compare_exchange_strong(v, v | kLazyPut, arch::mo_dekker)) return;
  if (used_recently(c, epoch)) return;
  uint32_t lazy = v | kLazyPut;
  if (!c.cid.compare_exchange_strong(lazy, kUnset, arch::mo_dekker)) return;
  free_private(v);
  lockevent_inc(LockEvent::cid_reclaim);
}

void reset_percpu() {
  for (uint32_t cpu = 0; cpu < g_ncpus; ++cpu) {
    g_cpu_cache[cpu].cid.store(kUnset, arch::mo_hint);
    g_cpu_cache[cpu].epoch.store(0, arch::mo_hint);
  }
  for (auto& w : g_private.bits) w.store(0, arch::mo_hint);
  g_private.lock.store(0, arch::mo_hint);  // a thread that did not survive fork may have held it
  g_private.use_lock.store(0, arch::mo_hint);
  g_private.next_scan_ns.store(0, arch::mo_hint);
  g_epoch.store(0, arch::mo_hint);
}

void forget_thread_state() { t_cid = {-1, false, 0, 0, false}; }

bool g_switch_model = false;

void install_hooks(bool global) {
  void (*before)() = g_switch_model ? &switch_out : global ? &put_global : nullptr;
  g_before_sleep_hook.store(before, std::memory_order_relaxed);
  g_after_sleep_hook.store(g_switch_model ? &switch_in : nullptr, std::memory_order_relaxed);
  thread_registry::g_thread_exit_hook.store(global ? &put_global : nullptr, std::memory_order_relaxed);
}

}  // namespace

// ------------------------------------------------------------ slow paths

// Share an id until our next sleep instead of owning one.
uint32_t global_borrow() {
  t_cid.global_borrowed = true;
  t_cid.global_id = static_cast<int32_t>(borrowed_id());
  return static_cast<uint32_t>(t_cid.global_id);
}

namespace {
__attribute__((noinline)) uint32_t global_take_body() {
  // Registered, so the registry's exit hook gives the id back. A thread on
  // the shared slot has no exit hook: it borrows, as when the ids run out.
  if (__builtin_expect(is_shared(self_slot()), 0)) return global_borrow();
  SlowPathTimer timer;
  int32_t id;
  {
    CidLock g;
    id = take_lowest_locked();
  }
  if (id < 0) {  // full: free the ids of dead processes (only now: one kill(2) per holder)
    uint32_t reclaimed = reclaim_dead_owners();
    lockevent_add(LockEvent::cid_reclaim, reclaimed);
    if (reclaimed != 0) {
      CidLock g;
      id = take_lowest_locked();
    }
  }
  if (id < 0) return global_borrow();  // more threads than kMaxCids hold ids
  lockevent_inc(LockEvent::cid_alloc);
  t_cid.global_borrowed = false;
  t_cid.global_id = id;
  return static_cast<uint32_t>(id);
}
}  // namespace

// The slow paths an id lookup can reach (global_take, percpu_refill,
// percpu_clock_check) keep cleanups (SlowPathTimer, CidLock), and lookups run
// in unlock calls, which preload does not run deferred (core/cancel.h): an
// asynchronous cancellation landing in a frame with cleanups would terminate
// the process. So a thread of the asynchronous type never enters them: it
// borrows an id (as when the ids run out) instead of taking or refilling
// one, and skips the clock check (the periodic scan is anyone's job). Each
// body sits in a frame of its own, behind these cleanup-free ones. Deferring
// them instead would let a cancellation that arrived meanwhile act inside
// the unlock, with the read lock not yet given back.
uint32_t global_take() {
  if (cancel::async_caller()) return global_borrow();
  return global_take_body();
}

void put_global() {
  int32_t id = t_cid.global_id;
  if (id < 0) return;
  t_cid.global_id = -1;
  if (t_cid.global_borrowed || g_shared == nullptr) return;
  SlowPathTimer timer;
  {
    CidLock g;
    // After release_process_ids() another process may own it already.
    if (g_shared->owner[id].load(arch::mo_hint) == g_pid) clear_locked(static_cast<uint32_t>(id));
  }
  lockevent_inc(LockEvent::cid_free);
}

uint32_t percpu_stamp(CpuCache& c, uint32_t epoch) {
  c.epoch.store(epoch, arch::mo_dekker);  // before reading the id: see the header
  return c.cid.load(arch::mo_dekker);
}

namespace {
__attribute__((noinline)) uint32_t percpu_refill_body(uint32_t cpu) {
  SlowPathTimer timer;
  CpuCache& c = g_cpu_cache[cpu];
  c.epoch.store(g_epoch.load(arch::mo_hint), arch::mo_dekker);
  for (;;) {
    uint32_t v = c.cid.load(arch::mo_dekker);
    if (is_valid(v)) return v;
    if (is_lazy_put(v)) {
      drop_lazy(c, v);
      continue;
    }
    uint32_t id = alloc_lowest();
    if (id >= kMaxCids) return borrowed_id();
    lockevent_inc(LockEvent::cid_alloc);
    uint32_t expected = kUnset;
    if (c.cid.compare_exchange_strong(expected, id, arch::mo_dekker)) return id;
    free_private(id);  // another thread on this CPU filled the slot first
  }
}

__attribute__((noinline)) void percpu_clock_check_body() {
  uint64_t now = now_ns();
  uint64_t next = g_private.next_scan_ns.load(arch::mo_hint);
  if (now < next) return;
  // One scanner per period (the kernel's cmpxchg on mm_cid_next_scan).
  if (!g_private.next_scan_ns.compare_exchange_strong(next, now + kScanPeriodNs, arch::mo_hint)) return;
  SlowPathTimer timer;
  percpu_scan();
}
}  // namespace

// (For the asynchronous type, see global_take.)
uint32_t percpu_refill(uint32_t cpu) {
  if (cancel::async_caller()) return borrowed_id();
  return percpu_refill_body(cpu);
}

void percpu_clock_check() {
  if (cancel::async_caller()) return;
  percpu_clock_check_body();
}

// task_mm_cid_work(): a new epoch, then free the ids of slots idle for a
// whole epoch, then push ids >= the number in use back toward 0.
void percpu_scan() {
  uint32_t epoch = g_epoch.fetch_add(1, arch::mo_dekker) + 1;
  for (uint32_t cpu = 0; cpu < g_ncpus; ++cpu) {
    CpuCache& c = g_cpu_cache[cpu];
    if (!used_recently(c, epoch)) remote_clear(c, epoch);
  }
  uint32_t weight = popcount(g_private.bits);
  for (uint32_t cpu = 0; cpu < g_ncpus; ++cpu) {
    CpuCache& c = g_cpu_cache[cpu];
    uint32_t v = c.cid.load(arch::mo_hint);
    if (is_valid(v) && v >= weight) remote_clear(c, epoch);
  }
}

uint32_t thread_first_use() {
  ThreadSlot& s = self_slot();
  lockevent_inc(LockEvent::cid_alloc);
  return (s.id - 1) & (kMaxCids - 1);
}

uint32_t borrowed_id() {
  lockevent_inc(LockEvent::cid_fallback);
  return (self_slot().id - 1) & (kMaxCids - 1);
}

// ------------------------------------------------------------- lifecycle

CidMode select(CidMode requested) {
  if (mode() == CidMode::global) put_global();
  g_requested = requested;
  note_own_pid();
  calibrate_clock();
  uint32_t ncpus = possible_cpus();
  g_ncpus = ncpus > kMaxCpus ? kMaxCpus : ncpus;
  CidMode m = requested;
  g_rseq_fell_back = m == CidMode::rseq && !arch::kernel_mm_cid_available();
  if (g_rseq_fell_back) m = CidMode::percpu;
  if (m == CidMode::global && !map_shared_ids()) m = CidMode::percpu;
  if (m != requested) lockevent_inc(LockEvent::cid_fallback);
  if (m == CidMode::percpu) reset_percpu();
  forget_thread_state();
  install_hooks(m == CidMode::global);
  g_mode.store(m, arch::mo_hint);
  return m;
}

namespace {
// The highest number in a sysfs CPU list ("0-127", "0,2-5"), or -1.
int highest_in_cpu_list(const char* list, ssize_t len) {
  int highest = -1, value = -1;
  for (ssize_t i = 0; i <= len; ++i) {
    char c = i < len ? list[i] : '\n';
    if (c >= '0' && c <= '9') {
      value = (value < 0 ? 0 : value * 10) + (c - '0');
    } else {
      if (value > highest) highest = value;
      value = -1;
    }
  }
  return highest;
}

// Fallback: the highest CPU this thread may run on.
int highest_in_affinity() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  for (int cpu = CPU_SETSIZE - 1; cpu > 0; --cpu)
    if (CPU_ISSET(cpu, &set)) return cpu;
  return 0;
}
}  // namespace

uint32_t possible_cpus() {
  // Reached lazily from a lock call (the percid arena's first use): no
  // cancellation point here (core/nocancel_io.h).
  char buf[256];
  std::size_t n = nocancel::read_small_file("/sys/devices/system/cpu/possible", buf, sizeof buf);
  int highest = n > 0 ? highest_in_cpu_list(buf, static_cast<ssize_t>(n)) : -1;
  if (highest < 0) highest = highest_in_affinity();
  return static_cast<uint32_t>(highest) + 1;
}

CidMode requested_mode() { return g_requested; }
bool rseq_fell_back() { return g_rseq_fell_back; }

uint32_t reclaim_dead_processes() {
  if (g_shared == nullptr) return 0;
  uint32_t freed = reclaim_dead_owners();
  lockevent_add(LockEvent::cid_reclaim, freed);
  return freed;
}

void release_process_ids() {
  if (g_shared == nullptr) return;
  CidLock g;
  for (uint32_t id = 0; id < kMaxCids; ++id)
    if (g_shared->owner[id].load(arch::mo_hint) == g_pid) clear_locked(id);
}

// The forking thread's global id is its parent twin's: forget it, free
// nothing, and leave the shared lock alone (its holder lives in another
// process). percpu's per-process state starts over.
void after_fork_in_child() {
  note_own_pid();
  forget_thread_state();
  if (mode() == CidMode::percpu) reset_percpu();
  if (g_switch_model) switch_in();  // the child's first thread runs: it holds an id
}

void set_switch_model(bool on) {
  g_switch_model = on;
  install_hooks(mode() == CidMode::global);
  if (on) switch_in();
}

bool switch_model() { return g_switch_model; }

namespace {
// Runs `step` unless the thread is inside another switch already: a signal
// handler that waits (nanosleep, poll, sigwait are async-signal-safe) while
// the interrupted thread holds the cid_lock must not ask for it again.
template <class Step>
void switch_step(LockEvent event, Step step) {
  if (t_cid.switching) return;
  t_cid.switching = true;
  int saved = errno;
  lockevent_inc(event);
  step();
  errno = saved;
  t_cid.switching = false;
}
}  // namespace

void switch_out() {
  switch_step(LockEvent::cid_switch_out, [] {
    if (mode() == CidMode::global) put_global();  // percpu, rseq, thread: the id stays where it is
  });
}

void switch_in() {
  switch_step(LockEvent::cid_switch_in, [] { (void)current(); });
}

void count_process_cpu() {
  if (!g_switch_model) return;
  timespec ts;
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return;
  lockevent_add(LockEvent::cid_switch_cpu_ns,
                static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec));
}

uint32_t ids_in_use() {
  if (mode() == CidMode::global) return g_shared ? popcount(g_shared->bits) : 0;
  return popcount(g_private.bits);
}

}  // namespace cid
}  // namespace lockswap
