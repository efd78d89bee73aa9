// core/spin_guard.h — a test-and-set lock for short, rare critical sections.
//
// For registries and allocators (thread slots, concurrency ids, reader-slot
// blocks), never for a lock's own fast path. The word is 0 when free, 1 when
// held; a word shared between processes takes SharedSpinGuard (below), whose
// holder may die inside without stopping the others. Waiters poll with a
// relaxed load and yield the CPU after kPollsBeforeYield polls, because the
// holder may have been preempted (userspace cannot disable preemption).
// Acquire on taking, release on dropping.
//
// SharedSpinGuard is the same lock for a word shared between processes that
// may die inside it (SIGKILL, the OOM killer). The word holds the holder's
// identity instead of 1:
//   bits  0..31  pid   the holding process (> 0), as its own pid namespace
//                      numbers it
//   bits 32..63  ns    a tag of that pid namespace (the low 32 bits of its
//                      inode number), 0 = unknown
// A waiter that has polled kPollsPerHolderCheck times past the yield point
// asks whether the holder has ended: kill(pid, 0) failing with ESRCH, or the
// process a zombie (/proc/<pid>/stat state Z or X: its parent has not reaped
// it, and may be the very process waiting here), with the holder's ns tag
// equal to the waiter's own and non-zero, means the holder is dead, and the
// waiter takes the lock over by a CAS from the word it
// judged (two waiters judging the same corpse: one CAS wins). Anything else
// (EPERM, a different or unknown namespace, where the same number names
// another process) counts as alive: the old behaviour, wait. The caller's
// critical section must be written so that the state a holder killed at any
// point leaves behind is one the next holder accepts (core/cid/global.cpp says why
// its sections are). Residual risks, both needing the kernel to hand the dead
// holder's pid to a new process of the same namespace: before the takeover
// the waiter keeps waiting until that process exits too (liveness, not
// safety); between a waiter's kill() and its CAS a recycled pid that has
// meanwhile taken the lock legitimately would be overtaken (the pid space
// must wrap around within those few instructions).
#pragma once
#include <sched.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "arch/atomic.h"
#include "arch/relax.h"
#include "core/nocancel_io.h"

namespace lockswap {

namespace spin_guard {
inline constexpr unsigned kPollsBeforeYield = 64;

// The pause after a failed poll: relax at first, then yield, because the
// holder may have been preempted.
inline void pause_after_poll(unsigned polls) {
  if (polls > kPollsBeforeYield)
    sched_yield();
  else
    arch::cpu_relax();
}
}  // namespace spin_guard

class SpinGuard {
 public:
  static constexpr unsigned kPollsBeforeYield = spin_guard::kPollsBeforeYield;

  explicit SpinGuard(std::atomic<uint32_t>& word) : word_(word) {
    if (word_.exchange(1, arch::mo_lock) == 0) return;
    contended_ = true;
    for (unsigned polls = 0;; ++polls) {
      if (word_.load(arch::mo_hint) == 0 && word_.exchange(1, arch::mo_lock) == 0) return;
      spin_guard::pause_after_poll(polls);
    }
  }
  ~SpinGuard() { word_.store(0, arch::mo_unlock); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

  // The first attempt found the lock held.
  bool contended() const { return contended_; }

 private:
  std::atomic<uint32_t>& word_;
  bool contended_ = false;
};

// Whether /proc says `pid` is a zombie (or being torn down). False when it
// cannot tell. No allocation, no cancellation point.
inline bool process_is_zombie(pid_t pid) {
  char path[32] = "/proc/";
  char digits[12];
  int n = 0;
  for (auto v = static_cast<uint32_t>(pid); n == 0 || v != 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  char* p = path + 6;
  while (n > 0) *p++ = digits[--n];
  std::memcpy(p, "/stat", 6);
  char stat[512];  // "pid (comm) S ...": the state follows the last ')'
  if (nocancel::read_small_file(path, stat, sizeof stat) == 0) return false;
  const char* close = std::strrchr(stat, ')');
  return close != nullptr && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

// Whether process `pid` has ended: no such process, or a zombie. errno is
// left alone (lock calls do not change it).
inline bool process_has_ended(pid_t pid) {
  int saved = errno;
  bool ended = kill(pid, 0) != 0 ? errno == ESRCH : process_is_zombie(pid);
  errno = saved;
  return ended;
}

// The word a SharedSpinGuard holder stores: never 0 for a real pid.
inline constexpr uint64_t shared_guard_holder(int32_t pid, uint32_t pid_ns_tag) {
  return (static_cast<uint64_t>(pid_ns_tag) << 32) | static_cast<uint32_t>(pid);
}

class SharedSpinGuard {
 public:
  static constexpr unsigned kPollsPerHolderCheck = 256;
  static_assert(kPollsPerHolderCheck > spin_guard::kPollsBeforeYield, "the holder gets its yields before it is judged");

  // `self`: shared_guard_holder() of the calling process.
  SharedSpinGuard(std::atomic<uint64_t>& word, uint64_t self) : word_(word) {
    uint64_t seen = 0;
    if (word_.compare_exchange_strong(seen, self, arch::mo_lock, arch::mo_hint)) return;
    contended_ = true;
    for (unsigned polls = 0;; ++polls) {
      seen = word_.load(arch::mo_hint);
      if (seen == 0 && word_.compare_exchange_strong(seen, self, arch::mo_lock, arch::mo_hint)) return;
      if (seen != 0 && polls % kPollsPerHolderCheck == kPollsPerHolderCheck - 1 && holder_is_dead(seen, self) &&
          word_.compare_exchange_strong(seen, self, arch::mo_lock, arch::mo_hint)) {
        recovered_ = true;
        return;
      }
      spin_guard::pause_after_poll(polls);
    }
  }
  ~SharedSpinGuard() { word_.store(0, arch::mo_unlock); }
  SharedSpinGuard(const SharedSpinGuard&) = delete;
  SharedSpinGuard& operator=(const SharedSpinGuard&) = delete;

  bool contended() const { return contended_; }
  // The lock was taken over from a holder that had died.
  bool recovered() const { return recovered_; }

  // Dead only when both sides name pids in the same, known namespace.
  static bool holder_is_dead(uint64_t holder, uint64_t self) {
    uint32_t ns = static_cast<uint32_t>(holder >> 32);
    if (ns == 0 || ns != static_cast<uint32_t>(self >> 32)) return false;
    return process_has_ended(static_cast<pid_t>(static_cast<uint32_t>(holder)));
  }

 private:
  std::atomic<uint64_t>& word_;
  bool contended_ = false;
  bool recovered_ = false;
};

}  // namespace lockswap
