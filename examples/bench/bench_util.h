// examples/bench/bench_util.h — what the benchmark programs share: the clock,
// the unit of simulated work (arch/'s spin-wait hint), a command-line walker,
// one start line / stop flag / watchdog, and the spread of per-thread ops that
// every result line reports (min, mean, max, fairness).
#pragma once
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "arch/relax.h"

namespace bench {

inline uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}
inline uint64_t now_ns() { return clock_ns(CLOCK_MONOTONIC); }

// `n` spin-wait hints: the unit of simulated work in and between critical sections.
inline void pause_n(int n) {
  for (int i = 0; i < n; ++i) lockswap::arch::cpu_relax();
}

// The environment variable, or `dflt` when unset or empty (for report lines).
inline const char* env_or(const char* name, const char* dflt) {
  const char* v = getenv(name);
  return (v && *v) ? v : dflt;
}

// xorshift64*: a deterministic per-thread stream for picking operations.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed ? seed : 0x9e3779b97f4a7c15ull) {}
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545f4914f6cdd1dull;
  }
};

// Which object the executable's calls to a lock function resolve to:
// "liblockswap.so" under LD_PRELOAD, "libc.so.6" without.
inline std::string resolved_in(void* fn) {
  Dl_info info{};
  if (dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return "?";
  std::string p = info.dli_fname;
  auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// The usage text (a printf format taking the program path), after `why`
// when there is one; exit status 2.
[[noreturn]] inline void usage_exit(const char* prog, const char* why, const char* usage_format, const char* argv0) {
  if (why) fprintf(stderr, "%s: %s\n", prog, why);
  fprintf(stderr, usage_format, argv0);
  exit(2);
}

inline void sleep_s(double secs) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(secs);
  ts.tv_nsec = static_cast<long>((secs - static_cast<double>(ts.tv_sec)) * 1e9);
  while (nanosleep(&ts, &ts) != 0) {
  }
}

// The command line, option by option: `while (args.next()) if (args.is("--x")) o.x = args.integer(); ...`.
// A missing or malformed value, or an unknown option, ends in `usage(why)`.
class Args {
 public:
  Args(int argc, char** argv, std::function<void(const char*)> usage)
      : argc_(argc), argv_(argv), usage_(std::move(usage)) {}
  // The usage is `usage_format` (a printf format taking the program path),
  // after "prog: why" when there is a why (usage_exit).
  Args(int argc, char** argv, const char* prog, const char* usage_format)
      : Args(argc, argv, [=](const char* why) { usage_exit(prog, why, usage_format, argv[0]); }) {}
  bool next() {
    if (++i_ >= argc_) return false;
    opt_ = argv_[i_];
    return true;
  }
  bool is(const char* name) const { return opt_ == name; }
  bool is_help() const { return opt_ == "-h" || opt_ == "--help"; }
  const char* value() {
    if (i_ + 1 >= argc_) fail(("missing value for " + opt_).c_str());
    return argv_[++i_];
  }
  long integer() {
    const char* s = value();
    char* end = nullptr;
    long v = strtol(s, &end, 10);
    if (end == s || *end) fail("expected an integer");
    return v;
  }
  double number() { return strtod(value(), nullptr); }
  [[noreturn]] void unknown() { fail(("unknown option " + opt_).c_str()); }
  [[noreturn]] void help() { fail(nullptr); }
  [[noreturn]] void fail(const char* why) {
    usage_(why);
    exit(2);
  }

 private:
  int argc_;
  char** argv_;
  std::function<void(const char*)> usage_;
  int i_ = 0;
  std::string opt_;
};

// One measured run: the threads wait at the start line, run until the stop
// flag, and count themselves out; a thread that never returns is a lost
// wake-up or a deadlock in the lock under test (HANG, exit status 3).
struct Race {
  alignas(64) std::atomic<int> start{0};
  alignas(64) std::atomic<int> stop{0};
  alignas(64) std::atomic<int> finished{0};

  void wait_start() const {
    while (start.load(std::memory_order_acquire) == 0) start.wait(0, std::memory_order_acquire);
  }
  bool stopped() const { return stop.load(std::memory_order_relaxed) != 0; }
  // CPU time the whole process used between the start line and the stop
  // flag (every thread; this one sleeps meanwhile): cpus_used() says how many
  // CPUs were busy, which tells a lock that leaves a CPU idle from one that
  // keeps both busy (docs/measuring.md, "CPUs used").
  uint64_t cpu_ns = 0;

  // Opens the start line, lets the threads run `secs`, raises the stop flag.
  // Returns the measured interval in ns.
  uint64_t run_for(double secs) {
    const uint64_t cpu0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    const uint64_t t0 = now_ns();
    start.store(1, std::memory_order_release);
    start.notify_all();
    sleep_s(secs);
    stop.store(1, std::memory_order_seq_cst);
    const uint64_t elapsed = now_ns() - t0;
    cpu_ns = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    return elapsed;
  }
  double cpus_used(uint64_t elapsed_ns) const {
    return elapsed_ns > 0 ? static_cast<double>(cpu_ns) / static_cast<double>(elapsed_ns) : 0.0;
  }
  void await_finished(int want, double secs, const char* prog, const char* suspect) {
    await_count(finished, want, secs, prog, suspect);
  }
  // Waits until `counter` reaches `want` (threads that returned), at most 20 s
  // + 10 x the run's length; else HANG: kills `child` (if any) and exits 3.
  static void await_count(std::atomic<int>& counter, int want, double secs, const char* prog, const char* suspect,
                          pid_t child = 0) {
    const double grace_s = 20.0 + 10.0 * secs;
    const uint64_t deadline = now_ns() + static_cast<uint64_t>(grace_s * 1e9);
    while (counter.load(std::memory_order_acquire) < want) {
      if (now_ns() > deadline) {
        fprintf(stderr, "%s: HANG: only %d of %d threads returned %.0f s after the stop flag (%s)\n", prog,
                counter.load(), want, grace_s, suspect);
        fflush(stderr);
        if (child > 0) kill(child, SIGKILL);
        _exit(3);
      }
      usleep(2000);
    }
  }
};

// `n` threads that wait at `race`'s start line, run body(i) (until the stop
// flag, as body sees fit) and count themselves out as finished.
template <class Body>
std::vector<std::thread> start_threads(Race& race, int n, Body body) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&race, body, i] {
      race.wait_start();
      body(i);
      race.finished.fetch_add(1);
    });
  }
  return threads;
}

// Per-thread op counts summed: the fields every result line reports.
struct OpsSpread {
  uint64_t total = 0, min = UINT64_MAX, max = 0;
  int threads = 0;

  void add(uint64_t ops) {
    total += ops;
    min = std::min(min, ops);
    max = std::max(max, ops);
    ++threads;
  }
  double mean() const { return threads > 0 ? static_cast<double>(total) / threads : 0.0; }
  // The slowest thread against the mean: 1 is perfectly fair.
  double fairness() const { return mean() > 0 ? static_cast<double>(min) / mean() : 0.0; }
};

}  // namespace bench
