// examples/bench/rwlock_bench.cpp — Waiman Long's lock microbenchmark, in userspace.
//
// N threads hammer ONE pthread_rwlock_t (or, with --mutex, one pthread_mutex_t)
// for a fixed duration, through the plain pthread API, so whatever is preloaded
// (liblockswap.so with LOCKSWAP_RWLOCK / LOCKSWAP_MUTEX, or nothing) is what gets
// measured. Each op picks read or write from a deterministic per-thread PRNG;
// inside the critical section it spins `load` pause instructions and touches
// shared data (readers read it, writers write it); between ops it does a fixed
// amount of non-critical work.
//
// A broken lock is detected, never timed: readers and writers check that the
// shared words are consistent, and at the end the shared counter must equal the
// number of write ops. A violation prints a message and aborts. A lock that
// loses a wake-up is caught by a watchdog (exit 3).
//
// Output: one line starting with "lockswap-bench " followed by key=value pairs
// (see print_result). This program never judges speed; run_matrix.py compares.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "examples/bench/bench_util.h"

namespace {

using bench::env_or;
using bench::now_ns;
using bench::pause_n;

struct Options {
  int threads = 4;
  int load = 1;            // pause instructions inside the critical section
  int work = 10;           // pause instructions between ops (non-critical work)
  double read_frac = 0.5;  // fraction of ops that are reads (rwlock mode)
  double duration = 1.0;   // seconds
  bool mutex = false;
  bool latency = true;     // clock_gettime around each lock call
  bool prefer_writer = false;  // PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP
  bool unlocked = false;   // --unlocked: take no lock at all (shows the checker firing)
  bool no_lock = false;    // --no-lock: no lock, every op a read: the ceiling of any lock
  uint64_t seed = 1;
  std::string label;       // copied to the output line (the driver's variant name)

  bool takes_lock() const { return !unlocked && !no_lock; }
};

constexpr const char* kUsage =
    "usage: %s [--threads N] [--load PAUSES] [--reads FRACTION|PERCENT%%] [--duration S]\n"
    "          [--work PAUSES] [--mutex] [--no-latency] [--prefer-writer] [--no-lock] [--seed N] [--label S]\n"
    "  --threads N       threads hammering the one lock (default 4)\n"
    "  --load P          pause instructions inside the critical section (default 1)\n"
    "  --reads F         read fraction 0..1, or a percentage like 90%% (default 0.5; rwlock only)\n"
    "  --duration S      seconds to run (default 1)\n"
    "  --work P          pause instructions of non-critical work between ops (default 10)\n"
    "  --mutex           one pthread_mutex_t instead of a pthread_rwlock_t (every op exclusive)\n"
    "  --no-latency      do not time the lock calls (no clock_gettime per op)\n"
    "  --prefer-writer   init the rwlock PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP\n"
    "                    (default: default attributes, i.e. glibc's reader preference)\n"
    "  --unlocked        take no lock at all: the consistency checks must abort (checker self-test)\n"
    "  --no-lock         take no lock and make every op a read: the same work with nothing shared\n"
    "                    written, the most ops/s any correct lock could reach (the ceiling)\n";

double parse_double(bench::Args& args, const char* s) {
  char* end = nullptr;
  double v = strtod(s, &end);
  if (end == s) args.fail("expected a number");
  if (*end == '%') {
    v /= 100.0;
    ++end;
  }
  if (*end != '\0') args.fail("trailing characters after a number");
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  bench::Args args(argc, argv, "rwlock_bench", kUsage);
  while (args.next()) {
    if (args.is("--threads")) o.threads = static_cast<int>(args.integer());
    else if (args.is("--load")) o.load = static_cast<int>(args.integer());
    else if (args.is("--work")) o.work = static_cast<int>(args.integer());
    else if (args.is("--reads")) o.read_frac = parse_double(args, args.value());
    else if (args.is("--duration")) o.duration = parse_double(args, args.value());
    else if (args.is("--seed")) o.seed = strtoull(args.value(), nullptr, 0);
    else if (args.is("--label")) o.label = args.value();
    else if (args.is("--mutex")) o.mutex = true;
    else if (args.is("--no-latency")) o.latency = false;
    else if (args.is("--prefer-writer")) o.prefer_writer = true;
    else if (args.is("--unlocked")) o.unlocked = true;
    else if (args.is("--no-lock")) o.no_lock = true;
    else if (args.is_help()) args.help();
    else args.unknown();
  }
  if (o.threads < 1 || o.threads > 4096) args.fail("--threads must be 1..4096");
  if (o.load < 0 || o.work < 0) args.fail("--load/--work must be >= 0");
  if (o.read_frac < 0 || o.read_frac > 1) args.fail("--reads must be within 0..1 (or 0%..100%)");
  if (!(o.duration > 0)) args.fail("--duration must be > 0");
  if (o.mutex) o.read_frac = 0;
  return o;
}

using bench::Rng;

// Latency histogram: 4 sub-buckets per power of two of nanoseconds.
constexpr int kBuckets = 64 * 4;
inline int bucket_of(uint64_t ns) {
  if (ns < 4) return static_cast<int>(ns);
  int msb = 63 - __builtin_clzll(ns);
  int sub = static_cast<int>((ns >> (msb - 2)) & 3);
  return msb * 4 + sub;
}
inline uint64_t bucket_upper(int b) {  // smallest ns value above bucket b
  if (b < 4) return static_cast<uint64_t>(b) + 1;
  int msb = b / 4, sub = b % 4;
  return (1ull << msb) + (static_cast<uint64_t>(sub + 1) << (msb - 2));
}

struct alignas(64) ThreadStats {
  uint64_t ops = 0, reads = 0, writes = 0;
  uint64_t max_rd_ns = 0, max_wr_ns = 0;
  uint32_t rd_hist[kBuckets] = {};
  uint32_t wr_hist[kBuckets] = {};
};

// The protected data: kWords words on their own cache lines. Writers set all
// of them to the same new value; a consistent state has them all equal.
constexpr int kWords = 8;
struct alignas(64) Shared {
  std::atomic<uint64_t> w[kWords];  // relaxed loads/stores: the lock orders them
};

Shared g_data;
alignas(64) pthread_rwlock_t g_rw;
alignas(64) pthread_mutex_t g_mx = PTHREAD_MUTEX_INITIALIZER;
bench::Race g_race;

[[noreturn]] void violated(const char* who, const char* what, uint64_t a, uint64_t b) {
  fprintf(stderr,
          "rwlock_bench: LOCK BROKEN: %s %s (saw %llu, expected %llu): mutual exclusion violated\n",
          who, what, static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
  fflush(stderr);
  abort();
}

inline void reader_cs(int load) {
  uint64_t v = g_data.w[0].load(std::memory_order_relaxed);
  pause_n(load);
  for (int i = kWords - 1; i >= 0; --i) {
    uint64_t x = g_data.w[i].load(std::memory_order_relaxed);
    if (x != v) violated("reader", "saw a write in progress", x, v);
  }
}

inline void writer_cs(int load) {
  uint64_t v = g_data.w[0].load(std::memory_order_relaxed);
  for (int i = 1; i < kWords; ++i) {
    uint64_t x = g_data.w[i].load(std::memory_order_relaxed);
    if (x != v) violated("writer", "found a half-finished write", x, v);
  }
  uint64_t n = v + 1;
  g_data.w[0].store(n, std::memory_order_relaxed);
  pause_n(load / 2);
  for (int i = 1; i < kWords; ++i) g_data.w[i].store(n, std::memory_order_relaxed);
  pause_n(load - load / 2);
  for (int i = 0; i < kWords; ++i) {
    uint64_t x = g_data.w[i].load(std::memory_order_relaxed);
    if (x != n) violated("writer", "had its write overwritten inside the critical section", x, n);
  }
}

void worker(const Options& o, int idx, ThreadStats& st) {
  Rng rng(o.seed * 0x100000001b3ull + static_cast<uint64_t>(idx) * 0x9e3779b97f4a7c15ull + 1);
  // read if the top 32 bits of the draw are below the threshold
  const uint64_t threshold = static_cast<uint64_t>(o.read_frac * 4294967296.0);
  ThreadStats s;
  g_race.wait_start();
  while (!g_race.stopped()) {
    // Drawn under --no-lock too, so that the ceiling does the same work.
    const bool drawn_read = !o.mutex && (rng.next() >> 32) < threshold;
    const bool read = o.no_lock || drawn_read;
    uint64_t t0 = 0, waited = 0;
    if (o.latency) t0 = now_ns();
    int rc = 0;
    if (!o.takes_lock()) {
    } else if (o.mutex) rc = pthread_mutex_lock(&g_mx);
    else if (read) rc = pthread_rwlock_rdlock(&g_rw);
    else rc = pthread_rwlock_wrlock(&g_rw);
    if (o.latency) waited = now_ns() - t0;
    if (rc != 0) {
      fprintf(stderr, "rwlock_bench: lock call returned %d (%s)\n", rc, strerror(rc));
      abort();
    }
    if (read) reader_cs(o.load);
    else writer_cs(o.load);
    if (!o.takes_lock()) {
    } else if (o.mutex) rc = pthread_mutex_unlock(&g_mx);
    else rc = pthread_rwlock_unlock(&g_rw);
    if (rc != 0) {
      fprintf(stderr, "rwlock_bench: unlock call returned %d (%s)\n", rc, strerror(rc));
      abort();
    }
    ++s.ops;
    if (read) {
      ++s.reads;
      if (o.latency) {
        s.max_rd_ns = std::max(s.max_rd_ns, waited);
        ++s.rd_hist[bucket_of(waited)];
      }
    } else {
      ++s.writes;
      if (o.latency) {
        s.max_wr_ns = std::max(s.max_wr_ns, waited);
        ++s.wr_hist[bucket_of(waited)];
      }
    }
    pause_n(o.work);
  }
  st = s;
  g_race.finished.fetch_add(1, std::memory_order_release);
}

double percentile_us(const std::vector<uint64_t>& hist, double q) {
  uint64_t total = 0;
  for (uint64_t c : hist) total += c;
  if (total == 0) return 0;
  uint64_t want = static_cast<uint64_t>(q * static_cast<double>(total));
  if (want >= total) want = total - 1;
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += hist[b];
    if (seen > want) return static_cast<double>(bucket_upper(b)) / 1000.0;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);

  if (!o.mutex) {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    if (o.prefer_writer)
      pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    int rc = pthread_rwlock_init(&g_rw, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc != 0) {
      fprintf(stderr, "rwlock_bench: pthread_rwlock_init: %s\n", strerror(rc));
      return 1;
    }
  }

  std::vector<ThreadStats> stats(static_cast<size_t>(o.threads));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(o.threads));
  for (int i = 0; i < o.threads; ++i) threads.emplace_back(worker, std::cref(o), i, std::ref(stats[static_cast<size_t>(i)]));

  const uint64_t elapsed_ns = g_race.run_for(o.duration);
  // Watchdog: every thread finishes its current op within moments of the stop
  // flag unless the lock lost a wake-up (or the machine is absurdly loaded).
  g_race.await_finished(o.threads, o.duration, "rwlock_bench", "lost wake-up or deadlock in the lock");
  for (auto& t : threads) t.join();

  bench::OpsSpread spread;
  uint64_t reads = 0, writes = 0, max_rd = 0, max_wr = 0;
  std::vector<uint64_t> rd_hist(kBuckets), wr_hist(kBuckets);
  for (const auto& s : stats) {
    spread.add(s.ops);
    reads += s.reads;
    writes += s.writes;
    max_rd = std::max(max_rd, s.max_rd_ns);
    max_wr = std::max(max_wr, s.max_wr_ns);
    for (int b = 0; b < kBuckets; ++b) {
      rd_hist[b] += s.rd_hist[b];
      wr_hist[b] += s.wr_hist[b];
    }
  }
  // Lost updates: every write op added exactly one to each word.
  for (int i = 0; i < kWords; ++i) {
    uint64_t x = g_data.w[i].load();
    if (x != writes) violated("final check:", "shared counter != number of write ops (lost update)", x, writes);
  }
  if (!o.mutex) pthread_rwlock_destroy(&g_rw);

  const uint64_t total = spread.total;
  const double secs = static_cast<double>(elapsed_ns) / 1e9;
  std::string impl = bench::resolved_in(o.mutex ? reinterpret_cast<void*>(&pthread_mutex_lock)
                                         : reinterpret_cast<void*>(&pthread_rwlock_rdlock));
  printf(
      "lockswap-bench label=%s mode=%s variant=%s impl=%s threads=%d load=%d work=%d read_pct=%.0f "
      "duration_s=%.3f ops=%llu reads=%llu writes=%llu kops=%.1f min_ops=%llu mean_ops=%.1f "
      "max_ops=%llu fairness=%.3f cpus=%.2f max_rd_wait_us=%.1f max_wr_wait_us=%.1f p99_rd_wait_us=%.2f "
      "p99_wr_wait_us=%.2f latency=%d locked=%d\n",
      o.label.empty() ? "-" : o.label.c_str(), o.mutex ? "mutex" : "rwlock",
      o.mutex ? env_or("LOCKSWAP_MUTEX", "-") : env_or("LOCKSWAP_RWLOCK", "-"), impl.c_str(), o.threads,
      o.load, o.work, o.read_frac * 100.0, secs, static_cast<unsigned long long>(total),
      static_cast<unsigned long long>(reads), static_cast<unsigned long long>(writes),
      static_cast<double>(total) / secs / 1000.0, static_cast<unsigned long long>(spread.min), spread.mean(),
      static_cast<unsigned long long>(spread.max), spread.fairness(), g_race.cpus_used(elapsed_ns),
      static_cast<double>(max_rd) / 1000.0, static_cast<double>(max_wr) / 1000.0,
      percentile_us(rd_hist, 0.99), percentile_us(wr_hist, 0.99), o.latency ? 1 : 0, o.takes_lock() ? 1 : 0);
  return 0;
}
