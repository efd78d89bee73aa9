// examples/bench/sem_bench.cpp — POSIX semaphore benchmark through the plain
// sem_* API, so whatever is preloaded (liblockswap.so with LOCKSWAP_SEM, or
// nothing) is what gets measured.
//
// Modes (--mode):
//   pingpong-threads  two threads, two semaphores: A posts x and waits y, B
//                     waits x and posts y. One op = one round trip (two
//                     wake-ups). Every wait blocks unless the partner is fast.
//   pingpong-procs    the same between two processes (fork) on a pshared pair
//                     in a MAP_SHARED mapping: PostgreSQL's pattern (a backend
//                     sleeps on its own semaphore, another process posts it).
//   mpmc              --posters P and --waiters W on a bounded buffer of
//                     --capacity K slots: posters wait `space` and post
//                     `items`, waiters wait `items` and post `space`. Both
//                     words are hit by every thread; waits block and posts wake.
//   hot               --threads N doing sem_wait + sem_post on ONE semaphore of
//                     initial value --value V (default N: nobody ever blocks, a
//                     pure compare-and-swap contention test on one word — the
//                     semaphore analog of lockref's open/close; V < N: waits
//                     block too).
//
// Correctness is checked, never speed: round counts of both ping-pong sides
// must match, and the final semaphore values must equal what the counted posts
// and waits imply (lost or duplicated units are reported as SEM BROKEN, exit
// 1). A wait that never returns is caught by a watchdog (HANG, exit 3).
//
// Output: one line starting with "lockswap-sem-bench " and key=value pairs.
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "examples/bench/bench_util.h"

namespace {

using bench::now_ns;
using bench::pause_n;

struct Options {
  std::string mode = "pingpong-threads";
  int threads = 8;     // hot
  int value = -1;      // hot: initial value (default: threads)
  int posters = 8;     // mpmc
  int waiters = 8;     // mpmc
  int capacity = 16;   // mpmc
  int work = 0;        // pause instructions between ops (hot, mpmc)
  double duration = 1.0;
  std::string label;
};

constexpr const char* kUsage =
    "usage: %s --mode pingpong-threads|pingpong-procs|mpmc|hot [--duration S] [--label S]\n"
    "          [--threads N] [--value V]                 (hot)\n"
    "          [--posters P] [--waiters W] [--capacity K] (mpmc)\n"
    "          [--work PAUSES]                           (hot, mpmc: non-critical work per op)\n";

Options parse(int argc, char** argv) {
  Options o;
  bench::Args args(argc, argv, "sem_bench", kUsage);
  while (args.next()) {
    if (args.is("--mode")) o.mode = args.value();
    else if (args.is("--threads")) o.threads = static_cast<int>(args.integer());
    else if (args.is("--value")) o.value = static_cast<int>(args.integer());
    else if (args.is("--posters")) o.posters = static_cast<int>(args.integer());
    else if (args.is("--waiters")) o.waiters = static_cast<int>(args.integer());
    else if (args.is("--capacity")) o.capacity = static_cast<int>(args.integer());
    else if (args.is("--work")) o.work = static_cast<int>(args.integer());
    else if (args.is("--duration")) o.duration = args.number();
    else if (args.is("--label")) o.label = args.value();
    else if (args.is_help()) args.help();
    else args.unknown();
  }
  if (o.mode != "pingpong-threads" && o.mode != "pingpong-procs" && o.mode != "mpmc" && o.mode != "hot")
    args.fail("unknown --mode");
  if (o.threads < 1 || o.threads > 4096 || o.posters < 1 || o.waiters < 1 || o.posters > 4096 ||
      o.waiters > 4096)
    args.fail("thread counts must be 1..4096");
  if (o.value < 0) o.value = o.threads;
  if (o.capacity < 1 || o.work < 0) args.fail("--capacity must be >= 1, --work >= 0");
  if (!(o.duration > 0)) args.fail("--duration must be > 0");
  return o;
}

constexpr const char* kSuspect = "lost wake-up in the semaphore";

[[noreturn]] void die_errno(const char* what) {
  fprintf(stderr, "sem_bench: %s: %s\n", what, strerror(errno));
  fflush(stderr);
  abort();
}

[[noreturn]] void broken(const char* what, long long got, long long want) {
  fprintf(stderr, "sem_bench: SEM BROKEN: %s (got %lld, expected %lld)\n", what, got, want);
  fflush(stderr);
  _exit(1);
}

// sem_wait, retried on EINTR (no handlers are installed, but be safe).
inline void swait(sem_t* s) {
  while (sem_wait(s) != 0) {
    if (errno != EINTR) die_errno("sem_wait");
  }
}
inline void spost(sem_t* s) {
  if (sem_post(s) != 0) die_errno("sem_post");
}
int value_of(sem_t* s) {
  int v = -1;
  if (sem_getvalue(s, &v) != 0) die_errno("sem_getvalue");
  return v;
}

// Shared state; for pingpong-procs it lives in a MAP_SHARED anonymous mapping.
struct alignas(64) Shared {
  alignas(64) sem_t a;
  alignas(64) sem_t b;
  alignas(64) std::atomic<int> start{0};
  alignas(64) std::atomic<int> stop{0};
  std::atomic<int> done1{0};
  std::atomic<int> finished{0};
  alignas(64) uint64_t rounds1 = 0;
  alignas(64) uint64_t rounds2 = 0;
};

void wait_start(Shared* sh) {
  while (sh->start.load(std::memory_order_acquire) == 0) usleep(200);
}

// Side 1: post a, wait b, until stop; then tell side 2 to quit.
void ping(Shared* sh) {
  wait_start(sh);
  uint64_t n = 0;
  while (!sh->stop.load(std::memory_order_relaxed)) {
    spost(&sh->a);
    swait(&sh->b);
    ++n;
  }
  sh->rounds1 = n;
  sh->done1.store(1, std::memory_order_seq_cst);
  spost(&sh->a);
  sh->finished.fetch_add(1);
}

// Side 2: wait a, post b, until side 1 says it is done.
void pong(Shared* sh) {
  wait_start(sh);
  uint64_t n = 0;
  for (;;) {
    swait(&sh->a);
    if (sh->done1.load(std::memory_order_seq_cst)) break;
    spost(&sh->b);
    ++n;
  }
  sh->rounds2 = n;
  sh->finished.fetch_add(1);
}

struct Result {
  uint64_t ops = 0;
  double secs = 0;
  uint64_t min_ops = 0, max_ops = 0;  // per thread (hot, mpmc)
  int threads = 0;
};

Result run_pingpong(const Options& o, bool procs) {
  Shared* sh;
  if (procs) {
    void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die_errno("mmap");
    sh = new (p) Shared();
  } else {
    sh = new Shared();
  }
  if (sem_init(&sh->a, procs ? 1 : 0, 0) != 0 || sem_init(&sh->b, procs ? 1 : 0, 0) != 0) die_errno("sem_init");

  pid_t child = 0;
  std::thread t1, t2;
  if (procs) {
    child = fork();
    if (child < 0) die_errno("fork");
    if (child == 0) {
      pong(sh);
      exit(0);  // not _exit: the preload's exit-time statistics of the child count too
    }
    t1 = std::thread(ping, sh);
  } else {
    t1 = std::thread(ping, sh);
    t2 = std::thread(pong, sh);
  }
  usleep(20000);  // let both sides reach wait_start (the child has to get scheduled)
  const uint64_t t0 = now_ns();
  sh->start.store(1, std::memory_order_release);
  bench::sleep_s(o.duration);
  sh->stop.store(1, std::memory_order_relaxed);
  const uint64_t t1ns = now_ns();
  bench::Race::await_count(sh->finished, 2, o.duration, "sem_bench", kSuspect, child);
  t1.join();
  if (procs) {
    int st = 0;
    if (waitpid(child, &st, 0) != child) die_errno("waitpid");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) broken("child process did not exit with 0", st, 0);
  } else {
    t2.join();
  }
  if (sh->rounds1 != sh->rounds2) broken("ping-pong round counts differ", static_cast<long long>(sh->rounds1),
                                         static_cast<long long>(sh->rounds2));
  if (value_of(&sh->a) != 0) broken("semaphore a not 0 at the end", value_of(&sh->a), 0);
  if (value_of(&sh->b) != 0) broken("semaphore b not 0 at the end", value_of(&sh->b), 0);
  if (sem_destroy(&sh->a) != 0 || sem_destroy(&sh->b) != 0) die_errno("sem_destroy");
  Result r;
  r.ops = sh->rounds1;
  r.secs = static_cast<double>(t1ns - t0) / 1e9;
  r.threads = 2;
  r.min_ops = r.max_ops = r.ops;
  return r;
}

struct alignas(64) Counter {
  uint64_t waits = 0, posts = 0, ops = 0;
};

Result run_hot(const Options& o) {
  static sem_t s;
  static bench::Race race;
  if (sem_init(&s, 0, static_cast<unsigned>(o.value)) != 0) die_errno("sem_init");
  std::vector<Counter> c(static_cast<size_t>(o.threads));
  auto th = bench::start_threads(race, o.threads, [&](int i) {
    Counter k;
    while (!race.stopped()) {
      swait(&s);
      spost(&s);
      ++k.ops;
      pause_n(o.work);
    }
    c[static_cast<size_t>(i)] = k;
  });
  usleep(10000);
  const uint64_t elapsed_ns = race.run_for(o.duration);
  race.await_finished(o.threads, o.duration, "sem_bench", kSuspect);
  for (auto& t : th) t.join();
  if (value_of(&s) != o.value) broken("hot semaphore value changed", value_of(&s), o.value);
  sem_destroy(&s);
  Result r;
  r.secs = static_cast<double>(elapsed_ns) / 1e9;
  r.threads = o.threads;
  bench::OpsSpread spread;
  for (auto& k : c) spread.add(k.ops);
  r.ops = spread.total;
  r.min_ops = spread.min;
  r.max_ops = spread.max;
  return r;
}

Result run_mpmc(const Options& o) {
  static sem_t items, space;
  static bench::Race race;
  if (sem_init(&items, 0, 0) != 0 || sem_init(&space, 0, static_cast<unsigned>(o.capacity)) != 0)
    die_errno("sem_init");
  const int n = o.posters + o.waiters;
  std::vector<Counter> c(static_cast<size_t>(n));
  auto th = bench::start_threads(race, n, [&](int i) {
    const bool poster = i < o.posters;
    Counter k;
    // Every wait is counted; after the stop flag each side leaves at its
    // first returned wait, so the main thread's P (W) extra posts release
    // every blocked poster (waiter).
    for (;;) {
      swait(poster ? &space : &items);
      ++k.waits;
      if (race.stop.load(std::memory_order_seq_cst)) break;
      spost(poster ? &items : &space);
      ++k.posts;
      ++k.ops;
      pause_n(o.work);
    }
    c[static_cast<size_t>(i)] = k;
  });
  usleep(10000);
  const uint64_t elapsed_ns = race.run_for(o.duration);
  for (int i = 0; i < o.posters; ++i) spost(&space);
  for (int i = 0; i < o.waiters; ++i) spost(&items);
  race.await_finished(n, o.duration, "sem_bench", kSuspect);
  for (auto& t : th) t.join();
  long long pw = 0, pp = 0, ww = 0, wp = 0;
  Result r;
  r.min_ops = UINT64_MAX;
  for (int i = 0; i < n; ++i) {
    const auto& k = c[static_cast<size_t>(i)];
    if (i < o.posters) {
      pw += static_cast<long long>(k.waits);
      pp += static_cast<long long>(k.posts);
    } else {
      ww += static_cast<long long>(k.waits);
      wp += static_cast<long long>(k.posts);
      r.ops += k.ops;  // an op = one item through the buffer
    }
    r.min_ops = std::min(r.min_ops, k.ops);
    r.max_ops = std::max(r.max_ops, k.ops);
  }
  // Conservation: initial + posts (threads and the main thread's extras) - waits.
  const long long want_items = pp + o.waiters - ww;
  const long long want_space = o.capacity + wp + o.posters - pw;
  if (value_of(&items) != want_items) broken("items: final value != posts - waits", value_of(&items), want_items);
  if (value_of(&space) != want_space) broken("space: final value != posts - waits", value_of(&space), want_space);
  sem_destroy(&items);
  sem_destroy(&space);
  r.secs = static_cast<double>(elapsed_ns) / 1e9;
  r.threads = n;
  return r;
}

using bench::env_or;

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  Result r;
  if (o.mode == "pingpong-threads") r = run_pingpong(o, false);
  else if (o.mode == "pingpong-procs") r = run_pingpong(o, true);
  else if (o.mode == "mpmc") r = run_mpmc(o);
  else r = run_hot(o);
  std::string impl = bench::resolved_in(reinterpret_cast<void*>(&sem_wait));
  printf("lockswap-sem-bench label=%s mode=%s variant=%s retries=%s impl=%s threads=%d posters=%d waiters=%d "
         "capacity=%d value=%d duration_s=%.3f ops=%llu kops=%.2f min_ops=%llu max_ops=%llu\n",
         o.label.empty() ? "-" : o.label.c_str(), o.mode.c_str(), env_or("LOCKSWAP_SEM", "-"),
         env_or("LOCKSWAP_LOCKREF_RETRIES", "-"), impl.c_str(), r.threads,
         o.mode == "mpmc" ? o.posters : 0, o.mode == "mpmc" ? o.waiters : 0, o.mode == "mpmc" ? o.capacity : 0,
         o.mode == "hot" ? o.value : 0, r.secs, static_cast<unsigned long long>(r.ops),
         static_cast<double>(r.ops) / r.secs / 1000.0, static_cast<unsigned long long>(r.min_ops),
         static_cast<unsigned long long>(r.max_ops));
  return 0;
}
