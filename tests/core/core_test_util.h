// tests/core/core_test_util.h — helpers shared by the core unit tests.
#pragma once
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <string>
#include <thread>

#include "core/cid.h"
#include "core/lock_events.h"
#include "core/thread_registry.h"
#include "core/wait_ctx.h"

// Built with ThreadSanitizer (each round of a stress test costs it about ten
// times more): the stress tests run fewer rounds, some tests cannot run.
#if defined(__SANITIZE_THREAD__)
#define CORE_TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CORE_TEST_UNDER_TSAN 1
#endif
#endif

namespace lockswap::coretest {

// The words preload keeps in a pthread_rwlock_t for the percid rwlock
// (core/percid/thread.h), zero = unlocked and unused.
struct PercidWords {
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> owner{0};
  std::atomic<uint64_t> waitq{0};
  std::atomic<uint32_t> osq{0};
  std::atomic<uint32_t> index{0};
  std::atomic<uint64_t> state{0};
};

#ifdef CORE_TEST_UNDER_TSAN
inline constexpr bool kUnderTsan = true;
#else
inline constexpr bool kUnderTsan = false;
#endif

// Gives `var` back the value it had at construction when it goes: a test
// that changes a global tunable leaves it as it found it.
template <class T>
class Restore {
 public:
  explicit Restore(T& var) : var_(var), saved_(var) {}
  ~Restore() { var_ = saved_; }
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;

 private:
  T& var_;
  T saved_;
};

// gtest's name generator for a typed suite: the i-th type of the suite's
// type list is called Names[i].
template <const char* const* Names>
struct NamesInTypeOrder {
  template <class T>
  static std::string GetName(int i) {
    return Names[i];
  }
};

using namespace std::chrono_literals;

// An absolute deadline `d` from now (d may be negative), normalised: a WaitCtx
// must hold a valid timespec (0 <= tv_nsec < 1e9), or the futex says EINVAL.
inline timespec clock_in(clockid_t clock, std::chrono::milliseconds d) {
  timespec ts;
  clock_gettime(clock, &ts);
  long long ns = static_cast<long long>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec +
                 std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return ts;
}
inline timespec monotonic_in(std::chrono::milliseconds d) { return clock_in(CLOCK_MONOTONIC, d); }

// Poll `pred` until true or `limit` passes.
template <class F>
bool eventually(F pred, std::chrono::milliseconds limit = 5000ms) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(200us);
  }
  return true;
}

// Lock event deltas since construction (process-wide, exited threads included).
class Events {
 public:
  Events() {
    for (uint32_t i = 0; i < kNumLockEvents; ++i) base_[i] = lockevent_total(static_cast<LockEvent>(i));
  }
  uint64_t operator()(LockEvent e) const { return lockevent_total(e) - base_[static_cast<uint32_t>(e)]; }

 private:
  uint64_t base_[kNumLockEvents];
};
inline constexpr bool kEvents = LOCKSWAP_LOCK_EVENTS != 0;

// A WaitCtx sleep whose deadline has passed: the futex returns at once, but
// the before-sleep hook runs, as before any real sleep in lockswap.
inline void sleep_in_lockswap() {
  std::atomic<uint32_t> word{0};
  timespec past = monotonic_in(-1ms);
  (void)WaitCtx::until(CLOCK_MONOTONIC, &past).sleep(&word, 0);
}

// While alive, threads that have no registry slot yet get the shared one (as
// when the address space is exhausted: core/thread_registry.h).
class RefuseNewSlots {
 public:
  RefuseNewSlots() { thread_registry::refuse_new_slots_for_testing(true); }
  ~RefuseNewSlots() { thread_registry::refuse_new_slots_for_testing(false); }
  RefuseNewSlots(const RefuseNewSlots&) = delete;
  RefuseNewSlots& operator=(const RefuseNewSlots&) = delete;
};

// Every concurrency-id allocator, for INSTANTIATE_TEST_SUITE_P.
inline auto every_cid() {
  return ::testing::Values(CidMode::global, CidMode::percpu, CidMode::rseq, CidMode::thread);
}
inline const char* cid_param_name(const ::testing::TestParamInfo<CidMode>& info) {
  switch (info.param) {
    case CidMode::global: return "global";
    case CidMode::percpu: return "percpu";
    case CidMode::rseq: return "rseq";
    default: return "thread";
  }
}

// Pins the calling thread to one CPU; false if that is not allowed.
inline bool pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// The first two CPUs this thread may run on, for a test that needs two
// threads on different CPUs; puts the calling thread's affinity back when it
// goes. ok() is false with fewer than two.
class TwoCpus {
 public:
  TwoCpus() {
    if (sched_getaffinity(0, sizeof saved_, &saved_) != 0) return;
    for (int c = 0; c < CPU_SETSIZE && n_ < 2; ++c)
      if (CPU_ISSET(c, &saved_)) cpu_[n_++] = c;
  }
  ~TwoCpus() { pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_); }
  TwoCpus(const TwoCpus&) = delete;
  TwoCpus& operator=(const TwoCpus&) = delete;
  bool ok() const { return n_ == 2; }
  int operator[](int i) const { return cpu_[i]; }

 private:
  cpu_set_t saved_{};
  int cpu_[2] = {-1, -1};
  int n_ = 0;
};

}  // namespace lockswap::coretest
