// core/cid/internal.h — what the concurrency-id allocators share (design:
// core/cid.h).
//
// core/cid/ holds one file per allocator — global.cpp (v6.3), percpu.cpp
// (v6.4), rseq.cpp, thread.cpp — and common.cpp, which selects one, runs
// the switch model and resets the state in a fork child. This header is the
// seam between those files: the id bitmaps, the slow-path timer, the
// in-lock mark, and the few calls common.cpp makes into an allocator.
// Nothing here is part of the API: include it from core/cid/*.cpp only.
#pragma once
#include <atomic>
#include <cstdint>
#include <ctime>

#include "arch/atomic.h"
#include "arch/clock.h"
#include "core/cid.h"
#include "core/lock_events.h"
#include "core/thread_registry.h"

namespace lockswap {
namespace cid {

inline uint64_t thread_cpu_ns() { return arch::clock_ns(CLOCK_THREAD_CPUTIME_ID); }

// What two back-to-back thread_cpu_ns() calls measure (common.cpp's
// calibrate_clock() at select()).
extern uint64_t g_clock_cost_ns;

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

// ------------------------------------------------------------------ bitmaps

using Bitmap = std::atomic<uint64_t>[kBitmapWords];

inline uint64_t bit_of(uint32_t id) { return 1ull << (id % 64); }

// Lowest clear bit, or kMaxCids when every bit is set.
inline uint32_t first_zero(const Bitmap& bits) {
  for (uint32_t w = 0; w < kBitmapWords; ++w) {
    uint64_t free_bits = ~bits[w].load(arch::mo_hint);
    if (free_bits != 0) return w * 64 + static_cast<uint32_t>(__builtin_ctzll(free_bits));
  }
  return kMaxCids;
}

inline uint32_t popcount(const Bitmap& bits) {
  uint32_t n = 0;
  for (const auto& w : bits) n += static_cast<uint32_t>(__builtin_popcountll(w.load(arch::mo_hint)));
  return n;
}

inline void forget_thread_state() { t_cid = {-1, false, 0, 0, false, false, 0}; }

// CPU slots the percpu scan walks (set by select()).
extern uint32_t g_ncpus;

// ------------------------------------------- what common.cpp asks of each allocator

// global.cpp
void note_own_pid();       // this process's pid and pid namespace, as the cid_lock's holder
bool attach_ids_page();    // at select(): false if the shared page cannot be mapped
void start_new_process();  // in a fork (or raw clone) child: the global part
uint32_t global_ids_in_use();

// percpu.cpp
void reset_percpu();  // at select() and in a fork child
uint32_t percpu_ids_in_use();

// rseq.cpp: `requested`, or percpu where the kernel provides no mm_cid.
CidMode rseq_or_percpu(CidMode requested);

}  // namespace cid
}  // namespace lockswap
