// tests/stats/stats_test.cpp — per-lock and per-site statistics
// (LOCKSWAP_STATS, preload/stats/stats.cpp) under every variant.
//
// Each test runs this same program again as a child (`--child SCENARIO`)
// with LOCKSWAP_STATS_FILE set; the child inherits LD_PRELOAD and the
// variant's settings. The parent reads the machine records
// (format `lockswap-v1`, preload/stats/dump.cpp) and names call sites the way `lockswap
// report` does: a site's ip is turned into a file offset through the child's
// `map` records, and the offset into a function name through this process's
// own mapping of the same executable (exported with -rdynamic, so dladdr
// sees the functions below).
#include <dlfcn.h>
#include <inttypes.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

// ------------------------------------------------------ counting allocator
// The whole program's malloc family, forwarding to glibc's; counted only on
// threads that are inside the measured lock calls (t_counting).
extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void* __libc_memalign(size_t, size_t);
extern "C" void __libc_free(void*);

static std::atomic<bool> g_count_allocations{false};
static std::atomic<long> g_allocations{0};
static __thread bool t_counting;

static void note_allocation() {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
}

// Runs fn() with this thread's allocations counted when the phase asks.
template <class Fn>
static void counted(Fn&& fn) {
  t_counting = g_count_allocations.load(std::memory_order_relaxed);
  fn();
  t_counting = false;
}

extern "C" void* malloc(size_t n) {
  note_allocation();
  return __libc_malloc(n);
}
extern "C" void* calloc(size_t n, size_t size) {
  note_allocation();
  return __libc_calloc(n, size);
}
extern "C" void* realloc(void* p, size_t n) {
  note_allocation();
  return __libc_realloc(p, n);
}
extern "C" void* memalign(size_t align, size_t n) {
  note_allocation();
  return __libc_memalign(align, n);
}
extern "C" int posix_memalign(void** out, size_t align, size_t n) {
  note_allocation();
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
extern "C" void* aligned_alloc(size_t align, size_t n) {
  note_allocation();
  return __libc_memalign(align, n);
}
extern "C" void free(void* p) { __libc_free(p); }

// ---------------------------------------------------------- the workload

namespace {

constexpr int kWorkers = 3;
constexpr int kRounds = 20;
constexpr long kHoldNs = 2'000'000;

pthread_mutex_t g_hot = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_cold = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_cond_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
pthread_rwlock_t g_rw = PTHREAD_RWLOCK_INITIALIZER;
pthread_mutex_t g_recursive;
sem_t g_sem;
volatile long g_sink;

void sleep_ns(long ns) {
  timespec t{ns / 1'000'000'000, ns % 1'000'000'000};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

}  // namespace

// A phase in which a holder keeps a lock for kHoldNs while the workers try
// to take it: their acquisitions are contended (the lock is held when they
// start), round after round.
struct Rounds {
  std::atomic<int> round{0};
  std::atomic<int> done{0};
  void wait_for(int r) const {
    while (round.load(std::memory_order_acquire) < r) sched_yield();
  }
  void finish_round(int r) {
    while (done.load(std::memory_order_acquire) < kWorkers * r) sched_yield();
  }
};

// Runs `inside` holding `l`. Always inlined: the lock and unlock calls are
// sites of the named function that calls it.
template <class L, class Inside>
__attribute__((always_inline)) inline void holding(L* l, int (*lock)(L*), int (*unlock)(L*), Inside inside) {
  lock(l);
  inside();
  unlock(l);
}
static void bump_sink() { g_sink = g_sink + 1; }
// Called by a holder: lets the workers of `round` start, and keeps the lock
// kHoldNs so that they find it held.
static void open_round_and_hold(int round, Rounds& r) {
  r.round.store(round, std::memory_order_release);
  sleep_ns(kHoldNs);
}

// The named functions (exported: the parent finds them by name).
extern "C" {
__attribute__((noinline)) void hot_path() { holding(&g_hot, pthread_mutex_lock, pthread_mutex_unlock, bump_sink); }
__attribute__((noinline)) void hot_holder(int round, Rounds& r) {
  holding(&g_hot, pthread_mutex_lock, pthread_mutex_unlock, [&] { open_round_and_hold(round, r); });
}
__attribute__((noinline)) void cold_path() { holding(&g_cold, pthread_mutex_lock, pthread_mutex_unlock, bump_sink); }
__attribute__((noinline)) void reader_path() {
  holding(&g_rw, pthread_rwlock_rdlock, pthread_rwlock_unlock, bump_sink);
}
__attribute__((noinline)) void writer_holder(int round, Rounds& r) {
  holding(&g_rw, pthread_rwlock_wrlock, pthread_rwlock_unlock, [&] { open_round_and_hold(round, r); });
}
__attribute__((noinline)) void sem_waiter_path() {
  sem_wait(&g_sem);
  g_sink = g_sink + 1;  // not a tail call: the site is in this function
}
// Each wait times out kCondWaitNs after the deadline is computed; the
// profiler's clock starts only inside the call, so a thread preempted in
// between (a loaded CI machine) waits less than that on the profiler's
// clock. The deadline is long enough that a preemption cannot bring the
// three waits below the test's 3 ms.
constexpr long kCondWaitNs = 20'000'000;
__attribute__((noinline)) void cond_path(int waits) {
  pthread_mutex_lock(&g_cond_mutex);
  for (int i = 0; i < waits; ++i) {
    timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += kCondWaitNs;
    if (until.tv_nsec >= 1'000'000'000) {
      until.tv_sec += 1;
      until.tv_nsec -= 1'000'000'000;
    }
    pthread_cond_timedwait(&g_cond, &g_cond_mutex, &until);
  }
  pthread_mutex_unlock(&g_cond_mutex);
}
__attribute__((noinline)) void recursive_path() {
  for (int i = 0; i < 3; ++i) pthread_mutex_lock(&g_recursive);
  g_sink = g_sink + 1;
  for (int i = 0; i < 3; ++i) pthread_mutex_unlock(&g_recursive);
}
}

namespace {

// Workers call `body` once per round while a holder keeps the lock.
template <class Holder, class Body>
void contended_rounds(Holder&& holder, Body&& body) {
  Rounds r;
  pthread_t t[kWorkers];
  struct Arg {
    Rounds* r;
    Body* body;
  } arg{&r, &body};
  auto worker = [](void* p) -> void* {
    auto* a = static_cast<Arg*>(p);
    for (int round = 1; round <= kRounds; ++round) {
      a->r->wait_for(round);
      counted(*a->body);
      a->r->done.fetch_add(1, std::memory_order_release);
    }
    return nullptr;
  };
  for (pthread_t& th : t) pthread_create(&th, nullptr, worker, &arg);
  for (int round = 1; round <= kRounds; ++round) {
    counted([&] { holder(round, r); });
    r.finish_round(round);
  }
  for (pthread_t& th : t) pthread_join(th, nullptr);
}

// One semaphore wait per round that finds no unit: the post comes kHoldNs
// after the waiter says it is about to wait.
std::atomic<bool> g_sem_waiter_started;

void sem_rounds() {
  for (int round = 0; round < kRounds / 4; ++round) {
    g_sem_waiter_started.store(false);
    pthread_t t;
    pthread_create(&t, nullptr, [](void*) -> void* {
      g_sem_waiter_started.store(true);
      counted(sem_waiter_path);
      return nullptr;
    }, nullptr);
    while (!g_sem_waiter_started.load()) sched_yield();
    sleep_ns(kHoldNs);
    counted([] { sem_post(&g_sem); });
    pthread_join(t, nullptr);
  }
}

void contended_phase() {
  contended_rounds([](int round, Rounds& r) { hot_holder(round, r); }, [] { hot_path(); });
  contended_rounds([](int round, Rounds& r) { writer_holder(round, r); }, [] { reader_path(); });
  sem_rounds();
}

void init_objects() {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&g_recursive, &a);
  sem_init(&g_sem, 0, 0);
}

// Child scenarios. Return the exit status.
int child_hot_cold() {
  init_objects();
  for (int i = 0; i < 5; ++i) cold_path();
  contended_phase();
  cond_path(3);
  for (int i = 0; i < 10; ++i) recursive_path();
  return 0;
}

// The contended phase with every contended acquisition sampled: prints the
// number of allocations made inside its lock calls (the second time: the
// first is a warm-up, e.g. for libunwind's own first use).
int child_no_malloc() {
  init_objects();
  contended_phase();  // warm-up: libunwind's and the tables' first use
  g_count_allocations.store(true);
  contended_phase();
  g_count_allocations.store(false);
  printf("allocations %ld\n", g_allocations.load());
  return 0;
}

// Locks, then waits for the parent's go on stdin (the parent sends the
// statistics signal meanwhile), then locks more and exits.
int child_signal() {
  init_objects();
  for (int i = 0; i < 5; ++i) cold_path();
  printf("ready\n");
  fflush(stdout);
  char go[8];
  if (read(0, go, sizeof go) <= 0) return 1;
  for (int i = 0; i < 5; ++i) cold_path();
  return 0;
}

// More mutexes than LOCKSWAP_STATS_LOCK_SLOTS=64 holds, taken by
// kOverflowThreads threads at once, kOverflowRounds times each; prints the
// array's bounds.
constexpr int kOverflowLocks = 200;
constexpr int kOverflowThreads = 3;
constexpr int kOverflowRounds = 50;
pthread_mutex_t g_many[kOverflowLocks];

int child_overflow() {
  for (pthread_mutex_t& m : g_many) pthread_mutex_init(&m, nullptr);
  pthread_t t[kOverflowThreads];
  for (pthread_t& th : t)
    pthread_create(&th, nullptr, [](void*) -> void* {
      for (int r = 0; r < kOverflowRounds; ++r)
        for (pthread_mutex_t& m : g_many) {
          pthread_mutex_lock(&m);
          g_sink = g_sink + 1;
          pthread_mutex_unlock(&m);
        }
      return nullptr;
    }, nullptr);
  for (pthread_t& th : t) pthread_join(th, nullptr);
  printf("%p %p\n", static_cast<void*>(&g_many[0]), static_cast<void*>(&g_many[kOverflowLocks]));
  return 0;
}

// ------------------------------------------------------------ the parent

struct Record {
  std::string type;
  std::map<std::string, std::string> kv;
  const std::string& operator[](const std::string& k) const {
    static const std::string none;
    auto it = kv.find(k);
    return it == kv.end() ? none : it->second;
  }
  uint64_t num(const std::string& k) const { return strtoull((*this)[k].c_str(), nullptr, 0); }
};

std::vector<Record> parse(const std::string& text) {
  std::vector<Record> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("lockswap-v1 ", 0) != 0) continue;
    std::istringstream fields(line.substr(12));
    Record r;
    fields >> r.type;
    std::string f;
    while (fields >> f) {
      size_t eq = f.find('=');
      if (eq != std::string::npos) r.kv[f.substr(0, eq)] = f.substr(eq + 1);
    }
    out.push_back(r);
  }
  return out;
}

// The records of the dump with sequence number `seq` (0: the last one).
std::vector<Record> dump(const std::vector<Record>& all, uint64_t seq = 0) {
  std::vector<Record> cur, last;
  bool in = false;
  for (const Record& r : all) {
    if (r.type == "begin") {
      cur.clear();
      in = true;
    }
    if (in) cur.push_back(r);
    if (r.type == "end") {
      in = false;
      if (seq == 0 || r.num("seq") == seq) last = cur;
    }
  }
  return last;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// ip in the child -> function name, through the child's map records and this
// process's mapping of the same file.
std::string symbolize(const std::vector<Record>& d, uint64_t ip) {
  std::string path;
  uint64_t file_off = 0;
  for (const Record& r : d)
    if (r.type == "map" && ip >= r.num("start") && ip < r.num("end")) {
      path = r["path"];
      file_off = ip - r.num("start") + r.num("offset");
    }
  if (path != self_exe()) return "?";
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long start, end, off;
    char perms[8];
    if (sscanf(line.c_str(), "%lx-%lx %7s %lx", &start, &end, perms, &off) != 4 || perms[2] != 'x') continue;
    if (line.find(path) == std::string::npos || file_off < off || file_off >= off + (end - start)) continue;
    Dl_info info;
    // ip is a return address: the call instruction is just before it.
    if (dladdr(reinterpret_cast<void*>(start + (file_off - off) - 1), &info) && info.dli_sname) return info.dli_sname;
  }
  return "?";
}

struct ChildResult {
  int status;
  std::string out;
};

// Runs `--child scenario` with the extra environment; optional `during`
// gets the child's pid and its stdin/stdout pipes.
template <class During>
ChildResult run_child(const char* scenario, std::vector<std::string> env, During&& during) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return {-1, ""};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    close(to_child[1]);
    close(from_child[0]);
    for (const std::string& e : env) putenv(strdup(e.c_str()));
    std::string exe = self_exe();
    execl(exe.c_str(), exe.c_str(), "--child", scenario, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  during(pid, to_child[1], from_child[0]);
  close(to_child[1]);
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = read(from_child[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(from_child[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {status, out};
}

ChildResult run_child(const char* scenario, std::vector<std::string> env) {
  return run_child(scenario, std::move(env), [](pid_t, int, int) {});
}

std::string stats_path(const char* name) {
  std::string p = std::string("/tmp/lockswap_stats_test_") + name + "_" + std::to_string(getpid());
  unlink(p.c_str());
  return p;
}

const Record* find(const std::vector<Record>& d, const std::string& type, const std::string& key,
                   const std::string& value) {
  for (const Record& r : d)
    if (r.type == type && r[key] == value) return &r;
  return nullptr;
}

// The sites whose ip lies in function `fn`, with operation `op`.
std::vector<const Record*> sites_in(const std::vector<Record>& d, const char* fn, const char* op) {
  std::vector<const Record*> out;
  for (const Record& r : d)
    if (r.type == "site" && r["op"] == op && symbolize(d, r.num("ip")) == fn) out.push_back(&r);
  return out;
}

// The one such site (null when there is none or more than one).
const Record* site_in(const std::vector<Record>& d, const char* fn, const char* op) {
  std::vector<const Record*> s = sites_in(d, fn, op);
  return s.size() == 1 ? s[0] : nullptr;
}

uint64_t hist_total(const std::string& h) {
  uint64_t total = 0;
  if (h == "-") return 0;
  std::istringstream in(h);
  std::string bucket;
  while (std::getline(in, bucket, ';')) total += strtoull(bucket.substr(bucket.find(':') + 1).c_str(), nullptr, 10);
  return total;
}

class StatsTest : public ::testing::Test {};

TEST_F(StatsTest, HotSiteRanksAboveColdSiteWithBacktraceAndCalls) {
  std::string path = stats_path("hotcold");
  ChildResult c = run_child("hot_cold", {"LOCKSWAP_STATS=profile", "LOCKSWAP_STATS_FILE=" + path, "LOCKSWAP_STATS_BACKTRACE=1"});
  ASSERT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << "child status " << c.status;
  std::vector<Record> d = dump(parse(read_file(path)));
  ASSERT_FALSE(d.empty()) << "no complete dump in " << path;
  EXPECT_EQ(d.front().type, "begin");
  EXPECT_EQ(d.front()["stats"], "profile");
  EXPECT_EQ(d.back().type, "end");

  for (const char* family : {"mutex", "rwlock", "cond", "sem"})
    ASSERT_NE(find(d, "calls", "family", family), nullptr) << "no calls record for " << family;
  EXPECT_GT(find(d, "calls", "family", "mutex")->num("calls"), 0u);
  EXPECT_NE(find(d, "map", "path", self_exe()), nullptr) << "no map record for the executable";
  EXPECT_NE(find(d, "dropped", "locks", "0"), nullptr);

  const Record* hot = site_in(d, "hot_path", "lock");
  const Record* cold = site_in(d, "cold_path", "lock");
  ASSERT_NE(hot, nullptr) << "no site in hot_path";
  ASSERT_NE(cold, nullptr) << "no site in cold_path";
  EXPECT_EQ(hot->num("acq"), static_cast<uint64_t>(kWorkers * kRounds));
  EXPECT_EQ(cold->num("acq"), 5u);
  EXPECT_GT(hot->num("contended"), cold->num("contended"));
  EXPECT_GT(hot->num("wait_ns"), cold->num("wait_ns"));
  EXPECT_EQ(hist_total(hot->kv.at("wait_hist")), hot->num("contended"));
  EXPECT_NE((*hot)["lock"], (*cold)["lock"]) << "hot and cold sites name the same lock";

  // The sampled backtrace starts at the call in hot_path.
  ASSERT_FALSE((*hot)["bt"].empty()) << "no backtrace on the hot site";
  std::string first = (*hot)["bt"].substr(0, (*hot)["bt"].find(','));
  EXPECT_EQ(symbolize(d, strtoull(first.c_str(), nullptr, 0)), "hot_path");

  // The holder's site holds for kHoldNs per round.
  const Record* holder = site_in(d, "hot_holder", "lock");
  ASSERT_NE(holder, nullptr);
  EXPECT_EQ(hist_total(holder->kv.at("hold_hist")), static_cast<uint64_t>(kRounds));
  EXPECT_GE(holder->num("hold_ns"), static_cast<uint64_t>(kRounds * kHoldNs));
  const Record* hot_lock = find(d, "lock", "id", (*hot)["lock"]);
  ASSERT_NE(hot_lock, nullptr);
  EXPECT_EQ(hot_lock->num("acq"), static_cast<uint64_t>((kWorkers + 1) * kRounds));
  EXPECT_EQ((*hot_lock)["kind"], "mutex");
}

TEST_F(StatsTest, ReadersSemaphoresCondWaitsAndRecursionAreCountedOnce) {
  std::string path = stats_path("kinds");
  ChildResult c = run_child("hot_cold", {"LOCKSWAP_STATS=profile", "LOCKSWAP_STATS_FILE=" + path});
  ASSERT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0);
  std::vector<Record> d = dump(parse(read_file(path)));
  ASSERT_FALSE(d.empty());

  const Record* reader = site_in(d, "reader_path", "rdlock");
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->num("acq"), static_cast<uint64_t>(kWorkers * kRounds));
  EXPECT_GT(reader->num("contended"), 0u);
  const Record* rw = find(d, "lock", "id", (*reader)["lock"]);
  ASSERT_NE(rw, nullptr);
  EXPECT_EQ((*rw)["kind"], "rwlock");
  EXPECT_EQ(rw->num("rd_acq"), static_cast<uint64_t>(kWorkers * kRounds));
  EXPECT_EQ(rw->num("acq"), static_cast<uint64_t>((kWorkers + 1) * kRounds));

  const Record* sem = site_in(d, "sem_waiter_path", "sem_wait");
  ASSERT_NE(sem, nullptr);
  EXPECT_EQ(sem->num("acq"), static_cast<uint64_t>(kRounds / 4));
  EXPECT_GT(sem->num("contended"), 0u);
  EXPECT_EQ((*find(d, "lock", "id", (*sem)["lock"]))["kind"], "sem");

  // Three timed-out waits: the cond site's wait time; the mutex is taken
  // once (the native condvar's re-lock is not another acquisition) and held
  // in four pieces around the three waits.
  const Record* wait = site_in(d, "cond_path", "timedwait");
  ASSERT_NE(wait, nullptr);
  EXPECT_EQ(wait->num("acq"), 3u);
  EXPECT_GE(wait->num("wait_ns"), 3'000'000u);
  const Record* cond_lock = site_in(d, "cond_path", "lock");
  ASSERT_NE(cond_lock, nullptr);
  EXPECT_EQ(cond_lock->num("acq"), 1u);
  EXPECT_EQ(cond_lock->num("contended"), 0u);
  EXPECT_EQ(hist_total(cond_lock->kv.at("hold_hist")), 4u);
  EXPECT_EQ(find(d, "lock", "id", (*cond_lock)["lock"])->num("acq"), 1u);

  // Recursive: every acquisition counts, one hold per outermost pair (the
  // compiler may give each of the three lock calls its own site).
  uint64_t rec_acq = 0, rec_holds = 0;
  for (const Record* r : sites_in(d, "recursive_path", "lock")) {
    rec_acq += r->num("acq");
    rec_holds += hist_total(r->kv.at("hold_hist"));
  }
  EXPECT_EQ(rec_acq, 30u);
  EXPECT_EQ(rec_holds, 10u);
}

TEST_F(StatsTest, NoAllocationOnContendedLockPathsWithBacktraces) {
  std::string path = stats_path("nomalloc");
  ChildResult c = run_child("no_malloc", {"LOCKSWAP_STATS=profile", "LOCKSWAP_STATS_FILE=" + path, "LOCKSWAP_STATS_BACKTRACE=1"});
  ASSERT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << c.out;
  EXPECT_EQ(c.out, "allocations 0\n");
  std::vector<Record> d = dump(parse(read_file(path)));
  const Record* hot = site_in(d, "hot_path", "lock");
  ASSERT_NE(hot, nullptr);
  EXPECT_FALSE((*hot)["bt"].empty());
}

TEST_F(StatsTest, SignalWritesADumpBeforeExit) {
  std::string path = stats_path("signal");
  bool seen_before_exit = false;
  ChildResult c = run_child("signal", {"LOCKSWAP_STATS=profile", "LOCKSWAP_STATS_FILE=" + path, "LOCKSWAP_STATS_SIGNAL=USR2"},
                            [&](pid_t pid, int to, int from) {
                              char line[16] = {};
                              if (read(from, line, 6) != 6) return;
                              kill(pid, SIGUSR2);
                              for (int i = 0; i < 500 && !seen_before_exit; ++i) {
                                seen_before_exit = !dump(parse(read_file(path)), 1).empty();
                                if (!seen_before_exit) sleep_ns(10'000'000);
                              }
                              (void)!write(to, "go\n", 3);
                            });
  ASSERT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << c.status;
  EXPECT_TRUE(seen_before_exit) << "no dump with seq=1 while the child waited";
  std::vector<Record> all = parse(read_file(path));
  std::vector<Record> at_signal = dump(all, 1), at_exit = dump(all, 2);
  ASSERT_FALSE(at_signal.empty());
  ASSERT_FALSE(at_exit.empty()) << "no exit dump after the signal's";
  EXPECT_EQ(site_in(at_signal, "cold_path", "lock")->num("acq"), 5u);
  EXPECT_EQ(site_in(at_exit, "cold_path", "lock")->num("acq"), 10u);
  EXPECT_EQ(at_signal.front()["pid"], at_exit.front()["pid"]);
}

// A statistics file alone (or LOCKSWAP_STATS=1|counts) dumps the lock event
// counters without installing the profiler: no per-lock, per-site, calls
// or map records, stats=counts in the header.
TEST_F(StatsTest, StatsFileAloneCountsWithoutTheProfiler) {
  const char* mutex = getenv("LOCKSWAP_MUTEX");
  bool counted_variant = mutex != nullptr && *mutex != '\0' && strcmp(mutex, "glibc") != 0;
  for (const char* setting : {"", "LOCKSWAP_STATS=1", "LOCKSWAP_STATS=counts"}) {
    std::string path = stats_path("counts");
    std::vector<std::string> env = {"LOCKSWAP_STATS_FILE=" + path};
    if (*setting) env.push_back(setting);
    ChildResult c = run_child("hot_cold", env);
    ASSERT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << setting;
    std::string text = read_file(path);
    std::vector<Record> d = dump(parse(text));
    ASSERT_FALSE(d.empty()) << setting << ": no complete dump";
    EXPECT_EQ(d.front()["stats"], "counts") << setting;
    EXPECT_NE(text.find(" stats=counts\n"), std::string::npos) << setting << ": human header line";
    for (const Record& r : d) {
      EXPECT_NE(r.type, "site") << setting << ": the profiler ran";
      EXPECT_NE(r.type, "lock") << setting << ": the profiler ran";
      EXPECT_NE(r.type, "calls") << setting << ": the profiler ran";
    }
    ASSERT_NE(find(d, "dropped", "locks", "0"), nullptr) << setting;
    // The contended phase makes a native mutex sleep: counted in counts mode.
    if (counted_variant) {
      bool any_event = false;
      for (const Record& r : d) any_event |= r.type == "event" && r.num("count") > 0;
      EXPECT_TRUE(any_event) << setting << ": no lock event counted";
    }
  }
}

// The profiler's lock table full (64 slots): the locks that fit are
// profiled exactly, the acquisitions of the others are reported as dropped,
// and together they are every acquisition the program made.
TEST_F(StatsTest, OverflowingLockTableReportsWhatDidNotFit) {
  std::string path = stats_path("overflow");
  ChildResult c = run_child("overflow", {"LOCKSWAP_STATS=profile", "LOCKSWAP_STATS_FILE=" + path,
                                         "LOCKSWAP_STATS_LOCK_SLOTS=64", "LOCKSWAP_STATS_BACKTRACE=0"});
  ASSERT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << c.status;
  uint64_t lo = 0, hi = 0;
  ASSERT_EQ(sscanf(c.out.c_str(), "%" SCNx64 " %" SCNx64, &lo, &hi), 2) << c.out;
  std::string text = read_file(path);
  std::vector<Record> d = dump(parse(text));
  ASSERT_FALSE(d.empty());
  uint64_t tracked_locks = 0, tracked_acq = 0;
  for (const Record& r : d) {
    if (r.type != "lock") continue;
    uint64_t addr = r.num("addr");
    EXPECT_TRUE(addr >= lo && addr < hi) << "a lock outside the test's array: " << r["addr"];
    ++tracked_locks;
    tracked_acq += r.num("acq");
    EXPECT_EQ(r.num("acq"), static_cast<uint64_t>(kOverflowThreads * kOverflowRounds)) << r["addr"];
  }
  const Record* dropped = nullptr;
  for (const Record& r : d)
    if (r.type == "dropped") dropped = &r;
  ASSERT_NE(dropped, nullptr);
  EXPECT_EQ(tracked_locks, 64u) << "every slot of the shrunk table used";
  EXPECT_EQ(tracked_acq + dropped->num("locks"),
            static_cast<uint64_t>(kOverflowLocks * kOverflowThreads * kOverflowRounds));
  EXPECT_EQ(dropped->num("locks"), static_cast<uint64_t>((kOverflowLocks - 64) * kOverflowThreads * kOverflowRounds));
  EXPECT_NE(text.find("lockswap: stats_lock_untracked"), std::string::npos) << "no human line on the overflow";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "--child") == 0) {
    std::string s = argv[2];
    if (s == "hot_cold") return child_hot_cold();
    if (s == "no_malloc") return child_no_malloc();
    if (s == "signal") return child_signal();
    if (s == "overflow") return child_overflow();
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
