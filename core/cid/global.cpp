// core/cid/global.cpp — LOCKSWAP_CID=global, v6.3's allocator: one
// cid_lock and one bitmap, in a page every forked child shares (design:
// core/cid.h, "global" and "global: the cid_lock").
#include <fcntl.h>
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
#include "core/cancel.h"
#include "core/cid.h"
#include "core/cid/internal.h"
#include "core/nocancel_io.h"
#include "core/spin_guard.h"

namespace lockswap {
namespace cid {
namespace {

int32_t g_pid = 0;       // this process (getpid() is a system call on current glibc)
uint64_t g_guard_self = 0;  // g_pid and its pid namespace, as the shared cid_lock's holder

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

// ------------------------------------------------ global: who holds ids

// Frees every id of this process in the page (cid_lock held).
void release_own_ids_locked() {
  for (uint32_t id = 0; id < kMaxCids; ++id)
    if (g_shared->owner[id].load(arch::mo_hint) == g_pid) clear_locked(id);
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

// ------------------------------------------- what common.cpp calls

void note_own_pid() {
  g_pid = raw_getpid();
  g_guard_self = shared_guard_holder(g_pid, pid_namespace_tag());
  g_mark->pid.store(g_pid, arch::mo_hint);
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

uint32_t global_ids_in_use() { return g_shared ? popcount(g_shared->bits) : 0; }

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

}  // namespace cid
}  // namespace lockswap
