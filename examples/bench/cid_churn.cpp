// examples/bench/cid_churn.cpp — the mm_cid regression's shape, in userspace.
//
// The seed (docs/seeds.md §4): under
// sysbench + PostgreSQL, backend *processes* forked from one postmaster kept
// replacing each other on the CPUs, and every switch took and gave back a
// concurrency id under one lock. This program builds the same traffic: a
// parent forks --procs children, each runs --threads threads, and every thread
// alternates --reads read lock/unlock pairs on its process's pthread_rwlock_t
// with a short sleep (a pthread_cond_timedwait nobody signals, so the sleep
// goes through lockswap when LOCKSWAP_MUTEX is native).
//
// Run it under LD_PRELOAD=liblockswap.so with LOCKSWAP_MUTEX=rwsem,
// LOCKSWAP_RWLOCK=percid and LOCKSWAP_CID=<allocator>: with `global` every
// sleep gives the thread's id back and the next read lock takes one, under
// the lock shared by all the processes; with `percpu`/`rseq` neither happens.
// Each child exits normally, so LOCKSWAP_STATS_FILE collects one block of
// lock events per process (cid_slow_ns, cid_lock_contended, ...).
// cid_churn.py runs the matrix and prints the table.
//
// Output: one line "cid-churn key=value ..." from the parent.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "examples/bench/bench_util.h"

namespace {

using bench::env_or;
using bench::now_ns;
using bench::pause_n;

struct Options {
  int procs = 4;
  int threads = 4;          // per process
  int reads = 20;           // read lock/unlock pairs between two sleeps
  int load = 20;            // pause instructions inside each read
  int sleep_us = 50;        // each sleep's timeout
  double duration = 1.0;    // seconds
};

constexpr int kMaxProcs = 256;

// Shared by the parent and every child (MAP_SHARED, created before fork).
struct Shared {
  std::atomic<int> ready{0};
  std::atomic<int> go{0};
  std::atomic<int> stop{0};
  std::atomic<uint64_t> ops[kMaxProcs];
  std::atomic<uint64_t> sleeps[kMaxProcs];
};

[[noreturn]] void usage(const char* why) {
  if (why) fprintf(stderr, "cid_churn: %s\n", why);
  fprintf(stderr,
          "usage: cid_churn [--procs P] [--threads T] [--reads R] [--load PAUSES] [--sleep-us U] [--duration S]\n"
          "  --procs P     processes forked from one parent (default 4, max %d)\n"
          "  --threads T   threads per process (default 4)\n"
          "  --reads R     read lock/unlock pairs between two sleeps (default 20)\n"
          "  --load P      pause instructions inside each read (default 20)\n"
          "  --sleep-us U  timeout of each sleep, a condition wait nobody signals (default 50)\n"
          "  --duration S  seconds (default 1)\n",
          kMaxProcs);
  exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") usage(nullptr);
    if (i + 1 >= argc) usage(("missing value for " + a).c_str());
    const char* v = argv[++i];
    if (a == "--procs") o.procs = atoi(v);
    else if (a == "--threads") o.threads = atoi(v);
    else if (a == "--reads") o.reads = atoi(v);
    else if (a == "--load") o.load = atoi(v);
    else if (a == "--sleep-us") o.sleep_us = atoi(v);
    else if (a == "--duration") o.duration = atof(v);
    else usage(("unknown option " + a).c_str());
  }
  if (o.procs < 1 || o.procs > kMaxProcs) usage("--procs out of range");
  if (o.threads < 1 || o.threads > 1024) usage("--threads must be 1..1024");
  if (o.reads < 1 || o.load < 0 || o.sleep_us < 0 || !(o.duration > 0)) usage("bad value");
  return o;
}

timespec monotonic_plus_us(int us) {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_nsec += static_cast<long>(us) * 1000;
  t.tv_sec += t.tv_nsec / 1'000'000'000;
  t.tv_nsec %= 1'000'000'000;
  return t;
}

// One thread's private sleeping place: a condition nobody signals.
class Nap {
 public:
  Nap() {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&c_, &a);
    pthread_condattr_destroy(&a);
  }
  ~Nap() {
    pthread_cond_destroy(&c_);
    pthread_mutex_destroy(&m_);
  }
  void take(int us) {
    timespec until = monotonic_plus_us(us);
    pthread_mutex_lock(&m_);
    while (pthread_cond_timedwait(&c_, &m_, &until) == 0) {
    }
    pthread_mutex_unlock(&m_);
  }

 private:
  pthread_mutex_t m_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c_;
};

void churn(const Options& o, Shared& sh, pthread_rwlock_t& rw, uint64_t& ops, uint64_t& sleeps) {
  Nap nap;
  sh.ready.fetch_add(1);
  while (sh.go.load() == 0) usleep(100);
  while (sh.stop.load(std::memory_order_relaxed) == 0) {
    for (int r = 0; r < o.reads; ++r) {
      pthread_rwlock_rdlock(&rw);
      pause_n(o.load);
      pthread_rwlock_unlock(&rw);
    }
    ops += static_cast<uint64_t>(o.reads);
    nap.take(o.sleep_us);
    ++sleeps;
  }
}

// A child: its own rwlock, o.threads threads churning on it; exit() (not
// _exit) so lockswap writes this process's statistics.
[[noreturn]] void child(const Options& o, Shared& sh, int index) {
  pthread_rwlock_t rw;
  pthread_rwlock_init(&rw, nullptr);
  std::vector<uint64_t> ops(static_cast<size_t>(o.threads)), sleeps(static_cast<size_t>(o.threads));
  std::vector<std::thread> ts;
  for (int t = 0; t < o.threads; ++t)
    ts.emplace_back(churn, std::cref(o), std::ref(sh), std::ref(rw), std::ref(ops[static_cast<size_t>(t)]),
                    std::ref(sleeps[static_cast<size_t>(t)]));
  for (auto& t : ts) t.join();
  uint64_t total = 0, naps = 0;
  for (int t = 0; t < o.threads; ++t) {
    total += ops[static_cast<size_t>(t)];
    naps += sleeps[static_cast<size_t>(t)];
  }
  sh.ops[index].store(total);
  sh.sleeps[index].store(naps);
  pthread_rwlock_destroy(&rw);
  exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("cid_churn: mmap");
    return 1;
  }
  Shared& sh = *new (p) Shared();
  fflush(stdout);
  std::vector<pid_t> kids;
  for (int i = 0; i < o.procs; ++i) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("cid_churn: fork");
      return 1;
    }
    if (pid == 0) child(o, sh, i);
    kids.push_back(pid);
  }
  while (sh.ready.load() < o.procs * o.threads) usleep(1000);
  uint64_t t0 = now_ns();
  sh.go.store(1);
  usleep(static_cast<useconds_t>(o.duration * 1e6));
  sh.stop.store(1);
  uint64_t t1 = now_ns();
  int failed = 0;
  for (pid_t k : kids) {
    int status = 0;
    waitpid(k, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  uint64_t ops = 0, sleeps = 0;
  for (int i = 0; i < o.procs; ++i) {
    ops += sh.ops[i].load();
    sleeps += sh.sleeps[i].load();
  }
  double secs = static_cast<double>(t1 - t0) / 1e9;
  printf("cid-churn cid=%s rwlock=%s procs=%d threads=%d reads=%d load=%d sleep_us=%d duration_s=%.3f "
         "ops=%llu sleeps=%llu kops=%.1f failed=%d\n",
         env_or("LOCKSWAP_CID", "-"), env_or("LOCKSWAP_RWLOCK", "-"), o.procs, o.threads, o.reads, o.load,
         o.sleep_us, secs, static_cast<unsigned long long>(ops), static_cast<unsigned long long>(sleeps),
         static_cast<double>(ops) / secs / 1000.0, failed);
  return failed ? 1 : 0;
}
