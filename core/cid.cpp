// core/cid.cpp — concurrency id allocators (design: core/cid.h).
#include "core/cid.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "arch/clock.h"
#include "arch/futex.h"
#include "arch/relax.h"
#include "core/cancel.h"
#include "core/nocancel_io.h"
#include "core/spin_guard.h"
#include "core/wait_ctx.h"

namespace lockswap {
namespace cid {

__thread ThreadCid t_cid __attribute__((tls_model("initial-exec"))) = {-1, false, 0, 0, false, false, 0};
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

// The raw system call: this is how a child made by a raw clone() finds its
// own pid (a libc that caches getpid() would answer with its parent's).
int32_t raw_getpid() { return static_cast<int32_t>(syscall(SYS_getpid)); }

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
  alignas(64) std::atomic<uint64_t> lock;  // the cid_lock: 0 or its holder (shared_guard_holder)
  std::atomic<uint32_t> sleepers;          // futex word: non-zero while a waiter may sleep on the lock
  alignas(64) Bitmap bits;                 // under lock
  std::atomic<int32_t> owner[kMaxCids];    // pid holding each id, under lock
};
SharedIds* g_shared = nullptr;  // mapped by select(), before any fork
bool g_page_shared = true;      // false: AT_SECURE, the page is this process's own (MAP_PRIVATE)
// Bumped when the process moves to a fresh page: ids taken from an older
// one are dropped at put, never cleared in the new one.
std::atomic<uint32_t> g_page_gen{1};
// Set while the process leaves its page (credentials changed), and for good
// if no fresh page could be mapped: every global slow path borrows then.
std::atomic<bool> g_detached{false};

// Who this process is. The page is MADV_WIPEONFORK: any child process, an
// atfork handler or not (a raw clone()), reads pid 0 in it.
struct ProcessMark {
  std::atomic<int32_t> pid;
};
ProcessMark g_mark_unwiped;  // no MADV_WIPEONFORK (Linux < 4.14): getpid() at each check
ProcessMark* g_mark = &g_mark_unwiped;
bool g_mark_wipes = false;
uid_t g_uids[3];  // real, effective, saved, as attached
gid_t g_gids[3];

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

void map_process_mark() {
  if (g_mark_wipes) return;
  void* p = mmap(nullptr, sizeof(ProcessMark), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  if (madvise(p, sizeof(ProcessMark), MADV_WIPEONFORK) != 0) {
    munmap(p, sizeof(ProcessMark));
    return;
  }
  g_mark = static_cast<ProcessMark*>(p);
  g_mark_wipes = true;
}

bool is_new_process() {
  if (g_mark_wipes) return g_mark->pid.load(arch::mo_hint) == 0;
  return raw_getpid() != g_pid;
}

void note_own_pid() {
  g_pid = raw_getpid();
  g_guard_self = shared_guard_holder(g_pid, pid_namespace_tag());
  g_mark->pid.store(g_pid, arch::mo_hint);
}

void note_credentials() {
  getresuid(&g_uids[0], &g_uids[1], &g_uids[2]);
  getresgid(&g_gids[0], &g_gids[1], &g_gids[2]);
}

// How often a thread compares the process's credentials with those it
// attached with (global: ThreadCid::uses counts its slow paths).
inline constexpr uint32_t kSlowPathsPerCredCheck = 64;
static_assert((kSlowPathsPerCredCheck & (kSlowPathsPerCredCheck - 1)) == 0, "a mask");

__attribute__((noinline)) bool credentials_changed() {
  uid_t u[3];
  gid_t g[3];
  getresuid(&u[0], &u[1], &u[2]);
  getresgid(&g[0], &g[1], &g[2]);
  for (int i = 0; i < 3; ++i)
    if (u[i] != g_uids[i] || g[i] != g_gids[i]) return true;
  return false;
}

bool at_secure() {
  if (lockswap_test_at_secure) return lockswap_test_at_secure() != 0;
  return getauxval(AT_SECURE) != 0;
}

SharedIds* map_ids_page(void* at, bool shared) {
  int flags = (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS | (at != nullptr ? MAP_FIXED : 0);
  void* p = mmap(at, sizeof(SharedIds), PROT_READ | PROT_WRITE, flags, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<SharedIds*>(p);  // zero-filled: unlocked, no id taken
}

// At select(): the page this process and its later children share (its
// own under AT_SECURE). select() runs before threads use ids.
bool attach_ids_page() {
  bool shared = !at_secure();
  if (g_shared == nullptr || g_page_shared != shared) {
    if (g_shared != nullptr) munmap(g_shared, sizeof(SharedIds));
    g_shared = map_ids_page(nullptr, shared);
    g_page_shared = shared;
  }
  if (g_shared == nullptr) return false;
  map_process_mark();
  note_own_pid();
  note_credentials();
  g_detached.store(false, arch::mo_hint);
  return true;
}

// ------------------------------------------------------- global: cid_lock

// Waits on the cid_lock: poll, then yield, then sleep on the shared futex in
// slices, judging the holder at each; give up after kHolderPatienceNs.
inline constexpr unsigned kPollsBeforeSleep = 2 * spin_guard::kPollsBeforeYield;
inline constexpr uint64_t kSleepSliceNs = 10'000'000;
inline constexpr uint64_t kHolderPatienceNs = 1'000'000'000;
static_assert(kPollsBeforeSleep > spin_guard::kPollsBeforeYield, "waiters yield before they sleep");
static_assert(kSleepSliceNs * 10 <= kHolderPatienceNs, "a holder is judged several times before it is given up on");

// The holder last given up on, and when it may next be judged again: later
// acquisitions that find it still there give up at once.
std::atomic<uint64_t> g_stalled_holder{0};
std::atomic<uint64_t> g_next_stall_probe_ns{0};
std::atomic<bool> g_said_stalled{false};

void reset_stall_state() {
  g_stalled_holder.store(0, arch::mo_hint);
  g_next_stall_probe_ns.store(0, arch::mo_hint);
  g_said_stalled.store(false, arch::mo_hint);
}

// /proc/<pid>/stat's state letter ('T' stopped, 't' traced), '?' unknown.
char process_state(pid_t pid) {
  char path[32], digits[12];
  int n = 0;
  for (auto v = static_cast<uint32_t>(pid); n == 0 || v != 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  std::memcpy(path, "/proc/", 6);
  char* p = path + 6;
  while (n > 0) *p++ = digits[--n];
  std::memcpy(p, "/stat", 6);
  char stat[512];
  if (nocancel::read_small_file(path, stat, sizeof stat) == 0) return '?';
  const char* close = std::strrchr(stat, ')');
  return close != nullptr && close[1] == ' ' && close[2] != '\0' ? close[2] : '?';
}

// Appends the decimal digits of v.
char* put_decimal(char* out, uint32_t v) {
  char digits[12];
  int n = 0;
  for (; n == 0 || v != 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  while (n > 0) *out++ = digits[--n];
  return out;
}

char* put_text(char* out, const char* text) {
  std::size_t n = std::strlen(text);
  std::memcpy(out, text, n);
  return out + n;
}

void say(const char* text, std::size_t n) {
  if (void (*writer)(const char*, std::size_t) = g_say_hook.load(std::memory_order_acquire)) writer(text, n);
}

// Once per process: why its threads borrow ids from now on.
void say_stalled(uint64_t holder) {
  if (g_said_stalled.exchange(true, arch::mo_hint)) return;
  int saved = errno;
  auto pid = static_cast<uint32_t>(holder);
  bool same_ns = static_cast<uint32_t>(holder >> 32) == static_cast<uint32_t>(g_guard_self >> 32);
  char state = same_ns ? process_state(static_cast<pid_t>(pid)) : '?';
  char text[200];
  char* p = put_text(text, "lockswap: LOCKSWAP_CID=global: process ");
  p = put_decimal(p, pid);
  p = put_text(p, " (state ");
  *p++ = state;
  p = put_text(p, ") has held the shared cid_lock for over ");
  p = put_decimal(p, static_cast<uint32_t>(kHolderPatienceNs / 1'000'000'000));
  p = put_text(p, " s; this process borrows ids while it holds it\n");
  say(text, static_cast<std::size_t>(p - text));
  errno = saved;
}

// Marks the calling thread as inside (or waiting for) an allocator lock. A
// signal handler that interrupts it there finds the mark and takes no
// allocator lock: they are not reentrant, and it would wait for its own
// thread. The first entry sets and clears the mark, nested ones leave it.
class ThreadInLock {
 public:
  ThreadInLock() : first_(!t_cid.in_lock) {
    if (!first_) return;
    t_cid.in_lock = true;
    std::atomic_signal_fence(std::memory_order_seq_cst);  // set before the lock word is touched
  }
  ~ThreadInLock() {
    if (!first_) return;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_cid.in_lock = false;
  }
  ThreadInLock(const ThreadInLock&) = delete;
  ThreadInLock& operator=(const ThreadInLock&) = delete;

  bool reentered() const { return !first_; }

 private:
  bool first_;
};

// The shared cid_lock; its holder may be another process of the tree,
// stopped or dead (see the header, "global: the cid_lock"). Check held():
// an acquisition may give up.
class CidLock {
 public:
  CidLock() : page_(*g_shared) {
    if (entry_.reentered()) return;
    uint64_t seen = 0;
    if (page_.lock.compare_exchange_strong(seen, g_guard_self, arch::mo_lock, arch::mo_hint)) {
      held_ = true;
    } else {
      lockevent_inc(LockEvent::cid_lock_contended);
      held_ = seen == g_stalled_holder.load(arch::mo_hint) ? take_from_stalled(seen) : wait();
    }
    if (held_ && g_stalled_holder.load(arch::mo_hint) != 0) g_stalled_holder.store(0, arch::mo_hint);
  }
  ~CidLock() {
    if (held_) release();
  }
  CidLock(const CidLock&) = delete;
  CidLock& operator=(const CidLock&) = delete;

  bool held() const { return held_; }

 private:
  bool try_take(uint64_t seen) {
    return page_.lock.compare_exchange_strong(seen, g_guard_self, arch::mo_lock, arch::mo_hint);
  }

  // A dead holder is taken over by a CAS from the word judged (two waiters
  // judging the same corpse: one wins).
  bool take_from_dead(uint64_t seen) {
    if (!SharedSpinGuard::holder_is_dead(seen, g_guard_self) || !try_take(seen)) return false;
    lockevent_inc(LockEvent::cid_lock_recovered);
    return true;
  }

  // The holder given up on is there again: at most once per slice,
  // process-wide, judge it (it may have died) and poll for it (it may be
  // running again: the same process holding the lock anew); else give up
  // at once.
  __attribute__((noinline)) bool take_from_stalled(uint64_t seen) {
    uint64_t now = arch::monotonic_ns();
    uint64_t next = g_next_stall_probe_ns.load(arch::mo_hint);
    if (now < next || !g_next_stall_probe_ns.compare_exchange_strong(next, now + kSleepSliceNs, arch::mo_hint))
      return false;
    return take_from_dead(seen) || poll();
  }

  __attribute__((noinline)) bool wait() { return poll() || sleep_until_taken(); }

  bool poll() {
    for (unsigned polls = 0; polls < kPollsBeforeSleep; ++polls) {
      spin_guard::pause_after_poll(polls);
      uint64_t seen = page_.lock.load(arch::mo_hint);
      if (seen == 0 && try_take(seen)) return true;
    }
    return false;
  }

  // Patience runs per holder: while the holder changes, the tree progresses.
  // errno is kept (futex_wait sets it; lock calls leave it alone).
  bool sleep_until_taken() {
    int saved = errno;
    bool taken = sleep_until_taken_or_given_up();
    errno = saved;
    return taken;
  }

  bool sleep_until_taken_or_given_up() {
    uint64_t holder = 0, start = 0;
    bool slept = false;
    for (;;) {
      uint64_t seen = page_.lock.load(arch::mo_hint);
      if (seen == 0 ? try_take(seen) : take_from_dead(seen)) {
        // Others may still sleep: this holder's release wakes the next one.
        if (slept) page_.sleepers.store(1, arch::mo_hint);
        return true;
      }
      if (seen == 0) continue;
      if (seen != holder) {
        holder = seen;
        start = arch::monotonic_ns();
      }
      uint64_t waited = arch::monotonic_ns() - start;
      if (waited >= kHolderPatienceNs) return give_up(seen);
      // Dekker with release(): the flag before the re-check of the word.
      page_.sleepers.store(1, arch::mo_dekker);
      if (page_.lock.load(arch::mo_dekker) != seen) continue;
      uint64_t slice = kHolderPatienceNs - waited < kSleepSliceNs ? kHolderPatienceNs - waited : kSleepSliceNs;
      timespec until = arch::timespec_at(arch::monotonic_ns() + slice);
      // Not private: the page is shared between processes. EINTR (a handler
      // ran), ETIMEDOUT, EAGAIN: all go round again.
      (void)arch::futex_wait(&page_.sleepers, 1, CLOCK_MONOTONIC, &until, /*shared=*/true);
      slept = true;
    }
  }

  bool give_up(uint64_t holder) {
    g_next_stall_probe_ns.store(arch::monotonic_ns() + kSleepSliceNs, arch::mo_hint);
    g_stalled_holder.store(holder, arch::mo_hint);
    say_stalled(holder);
    return false;
  }

  void release() {
    page_.lock.store(0, arch::mo_dekker);
    if (page_.sleepers.load(arch::mo_dekker) != 0 && page_.sleepers.exchange(0, arch::mo_dekker) != 0)
      arch::futex_wake(&page_.sleepers, 1, /*shared=*/true);
  }

  ThreadInLock entry_;  // first: marked before the lock word is touched, cleared after release
  SharedIds& page_;
  bool held_ = false;
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
  if (!g.held()) return 0;
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
  ThreadInLock entry;
  if (entry.reentered()) return kMaxCids;  // a signal handler: its caller borrows
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

void forget_thread_state() { t_cid = {-1, false, 0, 0, false, false, 0}; }

bool g_switch_model = false;

void install_hooks(bool global) {
  void (*before)() = g_switch_model ? &switch_out : global ? &put_global : nullptr;
  g_before_sleep_hook.store(before, std::memory_order_relaxed);
  g_after_sleep_hook.store(g_switch_model ? &switch_in : nullptr, std::memory_order_relaxed);
  thread_registry::g_thread_exit_hook.store(global ? &put_global : nullptr, std::memory_order_relaxed);
}

}  // namespace

// ------------------------------------------------ global: who holds ids

namespace {
// Frees every id of this process in the page (cid_lock held).
void release_own_ids_locked() {
  for (uint32_t id = 0; id < kMaxCids; ++id)
    if (g_shared->owner[id].load(arch::mo_hint) == g_pid) clear_locked(id);
}

// A new process (fork or raw clone child: one thread, a copy of the
// forking one): its own pid as the lock's holder and the ids' owner; the
// thread's id is its parent twin's, forgotten, not freed. A private page
// (AT_SECURE) is a copy of the parent's: it starts empty.
__attribute__((noinline, cold)) void start_new_process() {
  int saved = errno;  // reached from lock calls: stat(2) may fail
  note_own_pid();
  forget_thread_state();
  reset_stall_state();
  if (g_shared != nullptr && !g_page_shared) {
    g_shared->lock.store(0, arch::mo_hint);
    g_shared->sleepers.store(0, arch::mo_hint);
    for (auto& w : g_shared->bits) w.store(0, arch::mo_hint);
  }
  errno = saved;
}

// Credentials changed since the page was attached: give back what this
// process holds there, then put a fresh page of its own at the same address
// (MAP_FIXED: a thread still inside an operation on the old page finds
// mapped, empty memory, never a fault), for itself and its later children.
__attribute__((noinline, cold)) void move_to_fresh_page() {
  bool no = false;
  if (!g_detached.compare_exchange_strong(no, true, arch::mo_hint)) return;  // another thread moves
  int saved = errno;
  {
    CidLock g;
    if (g.held()) release_own_ids_locked();
  }
  if (map_ids_page(g_shared, g_page_shared) != nullptr) {  // else detached for good: every slow path borrows
    g_page_gen.fetch_add(1, arch::mo_hint);
    reset_stall_state();
    note_credentials();
    t_cid.global_id = -1;  // this thread's id is from the old page (others' are dropped at put)
    g_detached.store(false, arch::mo_hint);
  }
  errno = saved;
}

// Every global slow path that touches the page starts here. False: leave
// the page alone (being left, or left for good) and borrow.
inline bool enter_global() {
  if (__builtin_expect(is_new_process(), 0)) start_new_process();
  // Credentials (two system calls) at a thread's first slow path and every
  // kSlowPathsPerCredCheck-th after it. Not from a signal handler whose
  // thread is inside the cid_lock: the move takes it.
  if (__builtin_expect((t_cid.uses++ & (kSlowPathsPerCredCheck - 1)) == 0, 0) && !t_cid.in_lock &&
      credentials_changed())
    move_to_fresh_page();
  return !g_detached.load(arch::mo_hint);
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
  if (!enter_global()) return global_borrow();
  SlowPathTimer timer;
  int32_t id = -1;
  bool stalled;
  {
    CidLock g;
    stalled = !g.held();
    if (!stalled) id = take_lowest_locked();
  }
  if (id < 0 && !stalled) {  // full: free the ids of dead processes (only now: one kill(2) per holder)
    uint32_t reclaimed = reclaim_dead_owners();
    lockevent_add(LockEvent::cid_reclaim, reclaimed);
    if (reclaimed != 0) {
      CidLock g;
      if (g.held()) id = take_lowest_locked();
    }
  }
  if (id < 0) return global_borrow();  // ids all held, or the lock's holder stalled
  lockevent_inc(LockEvent::cid_alloc);
  t_cid.global_borrowed = false;
  t_cid.global_page = g_page_gen.load(arch::mo_hint);
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
  if (t_cid.global_id < 0) return;
  if (t_cid.global_borrowed || g_shared == nullptr) {
    t_cid.global_id = -1;
    return;
  }
  // Drops the id instead of touching the page when this is a new process
  // (the id is its parent twin's), when the process is leaving the page,
  // and when the id came from a page it has left.
  bool attached = enter_global();
  int32_t id = t_cid.global_id;
  uint32_t page = t_cid.global_page;
  t_cid.global_id = -1;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // a handler from here on sees no id
  if (id < 0 || !attached || page != g_page_gen.load(arch::mo_hint)) return;
  SlowPathTimer timer;
  {
    CidLock g;
    if (!g.held()) {  // the holder stalled: keep the id (still exclusive) until the next sleep
      t_cid.global_borrowed = false;
      t_cid.global_page = page;
      t_cid.global_id = id;
      return;
    }
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
  if (m == CidMode::global && !attach_ids_page()) m = CidMode::percpu;
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
  if (g_shared == nullptr || !enter_global()) return 0;
  uint32_t freed = reclaim_dead_owners();
  lockevent_add(LockEvent::cid_reclaim, freed);
  return freed;
}

void release_process_ids() {
  if (g_shared == nullptr) return;
  if (is_new_process()) start_new_process();  // a raw clone child frees nothing of its parent's
  if (g_detached.load(arch::mo_hint)) return;
  CidLock g;
  if (g.held()) release_own_ids_locked();
}

// The forking thread's global id is its parent twin's: forget it, free
// nothing, and leave the shared lock alone (its holder lives in another
// process). percpu's per-process state starts over. A child that runs no
// atfork handler (raw clone) does the global part at its first slow path.
void after_fork_in_child() {
  start_new_process();
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
