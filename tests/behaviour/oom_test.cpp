// tests/behaviour/oom_test.cpp — every lock, wait and semaphore call keeps
// working after the process has exhausted its address space (issue 8 item 2).
//
// The threads are created first (pthread_create needs memory), then RLIMIT_AS
// is lowered to the address space already in use, so every later mmap (and a
// malloc that needs one) fails. Then the threads use every interposed kind,
// contended, in groups of kGroupSize sharing one set of objects. Threads that
// never touched lockswap before the exhaustion have to get their per-thread
// record now (core/thread_registry.h): within the reserved slots, and — with
// more threads than were reserved — without one. Inside the exhausted window
// the workers neither allocate nor use gtest; they count results in atomics
// and the main thread asserts once the limit is restored.
#include <semaphore.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <threads.h>

#include <memory>
#include <vector>

#include "tests/common/test_util.h"

namespace {

using lstest::deadline_in;
using lstest::kGenerousMs;

constexpr int kGroupSize = 8;  // threads sharing one set of lock objects
constexpr int kIters = 4;      // rounds of each operation per thread
constexpr size_t kWorkerStack = 128 * 1024;

// ------------------------------------------------------- address space

// Lowers RLIMIT_AS to the address space in use now, and puts it back.
class AddressSpaceLimit {
 public:
  AddressSpaceLimit() { getrlimit(RLIMIT_AS, &old_); }
  ~AddressSpaceLimit() { restore(); }
  AddressSpaceLimit(const AddressSpaceLimit&) = delete;
  AddressSpaceLimit& operator=(const AddressSpaceLimit&) = delete;

  // True when a fresh one-page mapping is refused afterwards.
  bool exhaust() {
    rlimit lim = old_;
    lim.rlim_cur = vm_bytes();
    if (setrlimit(RLIMIT_AS, &lim) != 0) return false;
    lowered_ = true;
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return true;
    munmap(p, 4096);
    return false;
  }
  void restore() {
    if (lowered_) setrlimit(RLIMIT_AS, &old_);
    lowered_ = false;
  }

 private:
  // VmSize from /proc/self/statm (first field, pages); read with open/read.
  static rlim_t vm_bytes() {
    char buf[128] = {};
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return RLIM_INFINITY;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return RLIM_INFINITY;
    return static_cast<rlim_t>(strtoull(buf, nullptr, 10)) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE));
  }

  rlimit old_{};
  bool lowered_ = false;
};

// ----------------------------------------------------------- lock sets

// One group's objects: every kind, plus the data each one protects.
struct Group {
  pthread_mutex_t normal, recursive, errorcheck, timed;
  long n_normal = 0, n_recursive = 0, n_errorcheck = 0, n_timed = 0;
  pthread_rwlock_t rw;
  long rw_a = 0, rw_b = 0;  // written together under the write lock
  pthread_mutex_t cm;
  pthread_cond_t turn_cv, items_cv;
  long turn = 0, items = 0;
  sem_t sem;
  long n_sem = 0;
  mtx_t m11;
  cnd_t c11;
  long turn11 = 0;

  // Failures seen by the workers (they may not use gtest while memory is out).
  std::atomic<int> bad_rc{0}, torn_reads{0}, not_edeadlk{0};

  Group() {
    pthread_mutex_init(&normal, nullptr);
    pthread_mutex_init(&timed, nullptr);
    pthread_mutex_init(&cm, nullptr);
    lstest::init_mutex_of_type(&recursive, PTHREAD_MUTEX_RECURSIVE);
    lstest::init_mutex_of_type(&errorcheck, PTHREAD_MUTEX_ERRORCHECK);
    pthread_rwlock_init(&rw, nullptr);
    pthread_cond_init(&turn_cv, nullptr);
    pthread_cond_init(&items_cv, nullptr);
    sem_init(&sem, 0, 1);
    mtx_init(&m11, mtx_plain);
    cnd_init(&c11);
  }
  ~Group() {
    pthread_mutex_destroy(&normal);
    pthread_mutex_destroy(&timed);
    pthread_mutex_destroy(&cm);
    pthread_mutex_destroy(&recursive);
    pthread_mutex_destroy(&errorcheck);
    pthread_rwlock_destroy(&rw);
    pthread_cond_destroy(&turn_cv);
    pthread_cond_destroy(&items_cv);
    sem_destroy(&sem);
    mtx_destroy(&m11);
    cnd_destroy(&c11);
  }
  void check(int rc) {
    if (rc != 0) bad_rc.fetch_add(1, std::memory_order_relaxed);
  }
};

// Lengthens a critical section so that the other threads of the group queue.
void linger() { sched_yield(); }

void use_mutexes(Group& g) {
  for (int k = 0; k < kIters; ++k) {
    g.check(pthread_mutex_lock(&g.normal));
    ++g.n_normal;
    linger();
    g.check(pthread_mutex_unlock(&g.normal));

    g.check(pthread_mutex_lock(&g.recursive));
    g.check(pthread_mutex_lock(&g.recursive));
    ++g.n_recursive;
    linger();
    g.check(pthread_mutex_unlock(&g.recursive));
    g.check(pthread_mutex_unlock(&g.recursive));

    g.check(pthread_mutex_lock(&g.errorcheck));
    if (pthread_mutex_lock(&g.errorcheck) != EDEADLK) g.not_edeadlk.fetch_add(1, std::memory_order_relaxed);
    ++g.n_errorcheck;
    linger();
    g.check(pthread_mutex_unlock(&g.errorcheck));

    timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
    g.check(pthread_mutex_timedlock(&g.timed, &d));
    ++g.n_timed;
    linger();
    g.check(pthread_mutex_unlock(&g.timed));
  }
}

void rw_write(Group& g) {
  ++g.rw_a;
  linger();
  ++g.rw_b;
}
void rw_read(Group& g) {
  long a = g.rw_a;
  linger();
  if (a != g.rw_b) g.torn_reads.fetch_add(1, std::memory_order_relaxed);
}

void use_rwlock(Group& g, int index) {
  for (int k = 0; k < kIters; ++k) {
    timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
    if (index % 2 == 0) {
      g.check(k % 2 ? pthread_rwlock_timedwrlock(&g.rw, &d) : pthread_rwlock_wrlock(&g.rw));
      rw_write(g);
    } else {
      g.check(k % 2 ? pthread_rwlock_timedrdlock(&g.rw, &d) : pthread_rwlock_rdlock(&g.rw));
      rw_read(g);
    }
    g.check(pthread_rwlock_unlock(&g.rw));
  }
}

// Turn taking: thread `index` waits (cond_wait and cond_timedwait in turn)
// until the shared counter names it; broadcast wakes the next one.
void use_cond_turns(Group& g, int index) {
  for (int k = 0; k < kIters; ++k) {
    g.check(pthread_mutex_lock(&g.cm));
    while (g.turn % kGroupSize != index) {
      timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
      g.check(k % 2 ? pthread_cond_timedwait(&g.turn_cv, &g.cm, &d) : pthread_cond_wait(&g.turn_cv, &g.cm));
    }
    ++g.turn;
    g.check(pthread_cond_broadcast(&g.turn_cv));
    g.check(pthread_mutex_unlock(&g.cm));
  }
}

// Producers signal one item each; consumers wait for them.
void use_cond_items(Group& g, int index) {
  for (int k = 0; k < kIters; ++k) {
    g.check(pthread_mutex_lock(&g.cm));
    if (index % 2 == 0) {
      ++g.items;
      g.check(pthread_cond_signal(&g.items_cv));
    } else {
      while (g.items == 0) g.check(pthread_cond_wait(&g.items_cv, &g.cm));
      --g.items;
    }
    g.check(pthread_mutex_unlock(&g.cm));
  }
}

// A binary semaphore as a lock: sem_wait and sem_timedwait in turn.
void use_sem(Group& g) {
  for (int k = 0; k < kIters; ++k) {
    timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
    g.check(k % 2 ? sem_timedwait(&g.sem, &d) : sem_wait(&g.sem));
    ++g.n_sem;
    linger();
    g.check(sem_post(&g.sem));
  }
}

// C11: turn taking on mtx_t/cnd_t with cnd_wait and cnd_timedwait.
void use_c11(Group& g, int index) {
  for (int k = 0; k < kIters; ++k) {
    if (mtx_lock(&g.m11) != thrd_success) g.check(-1);
    while (g.turn11 % kGroupSize != index) {
      timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
      int rc = k % 2 ? cnd_timedwait(&g.c11, &g.m11, &d) : cnd_wait(&g.c11, &g.m11);
      if (rc != thrd_success) g.check(-1);
    }
    ++g.turn11;
    if (cnd_broadcast(&g.c11) != thrd_success) g.check(-1);
    if (cnd_signal(&g.c11) != thrd_success) g.check(-1);  // a spare signal is harmless
    if (mtx_unlock(&g.m11) != thrd_success) g.check(-1);
  }
}

// Lock calls made before the exhaustion, so the thread has its record already.
void touch_lockswap(Group& g) {
  pthread_mutex_lock(&g.cm);
  timespec past = deadline_in(CLOCK_REALTIME, -1);
  pthread_cond_timedwait(&g.turn_cv, &g.cm, &past);  // a wait slow path
  pthread_mutex_unlock(&g.cm);
}

// ------------------------------------------------------------ workers

struct Worker {
  Group* group;
  int index;
  bool touch_first;
  lstest::Sem* ready;  // posted once the worker is parked at the gate
  lstest::Gate* gate;  // opened once memory is out
};

void* worker_main(void* p) {
  Worker& w = *static_cast<Worker*>(p);
  if (w.touch_first) touch_lockswap(*w.group);
  w.ready->post();
  if (!w.gate->wait()) return nullptr;
  Group& g = *w.group;
  use_mutexes(g);
  use_rwlock(g, w.index);
  use_cond_turns(g, w.index);
  use_cond_items(g, w.index);
  use_sem(g);
  use_c11(g, w.index);
  return nullptr;
}

// Runs `threads` workers (a multiple of kGroupSize) with the address space
// exhausted, and checks every group's results once it is restored.
void run_exhausted(int threads, bool touch_first) {
  ASSERT_EQ(threads % kGroupSize, 0);
  const int groups = threads / kGroupSize;
  std::vector<std::unique_ptr<Group>> sets;
  for (int i = 0; i < groups; ++i) sets.push_back(std::make_unique<Group>());
  std::vector<Worker> workers(static_cast<size_t>(threads));
  std::vector<pthread_t> handles(static_cast<size_t>(threads));
  lstest::Sem ready;
  lstest::Gate gate;
  // Every path out of this function opens the gate: stopped unless it was
  // opened to go before, so no worker stays parked on objects about to be freed.
  struct OpenOnExit {
    lstest::Gate& g;
    ~OpenOnExit() { g.open(false); }
  } open_on_exit{gate};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kWorkerStack);
  for (int i = 0; i < threads; ++i) {
    workers[i] = {sets[i / kGroupSize].get(), i % kGroupSize, touch_first, &ready, &gate};
    ASSERT_EQ(pthread_create(&handles[i], &attr, worker_main, &workers[i]), 0) << "thread " << i;
  }
  pthread_attr_destroy(&attr);
  for (int i = 0; i < threads; ++i) ASSERT_TRUE(ready.wait()) << "worker " << i << " did not start";

  AddressSpaceLimit limit;
  bool exhausted = limit.exhaust();
  gate.open(true);
  bool all_joined = true;
  for (int i = 0; i < threads; ++i) {
    timespec d = deadline_in(CLOCK_REALTIME, 4 * kGenerousMs);
    if (pthread_timedjoin_np(handles[i], nullptr, &d) != 0) all_joined = false;
  }
  limit.restore();
  ASSERT_TRUE(exhausted) << "RLIMIT_AS could not be lowered to the address space in use";
  ASSERT_TRUE(all_joined) << "a worker hung after the address space ran out";

  const long per_group = long{kGroupSize} * kIters;
  for (int i = 0; i < groups; ++i) {
    Group& g = *sets[i];
    SCOPED_TRACE(testing::Message() << "group " << i);
    EXPECT_EQ(g.bad_rc.load(), 0);
    EXPECT_EQ(g.torn_reads.load(), 0);
    EXPECT_EQ(g.not_edeadlk.load(), 0);
    EXPECT_EQ(g.n_normal, per_group);
    EXPECT_EQ(g.n_recursive, per_group);
    EXPECT_EQ(g.n_errorcheck, per_group);
    EXPECT_EQ(g.n_timed, per_group);
    EXPECT_EQ(g.rw_a, per_group / 2);
    EXPECT_EQ(g.rw_b, per_group / 2);
    EXPECT_EQ(g.turn, per_group);
    EXPECT_EQ(g.items, 0);
    EXPECT_EQ(g.n_sem, per_group);
    EXPECT_EQ(g.turn11, per_group);
  }
}

// Fewer threads than the registry reserves: each new thread gets a record
// from memory mapped before the exhaustion.
TEST(AddressSpaceExhausted, FreshThreadsUseEveryKind) { run_exhausted(4 * kGroupSize, false); }

// More threads than one chunk of 1024 records (core/thread_registry.h): the
// ones beyond what was reserved run without a record of their own. Must run
// before any test that keeps >512 threads attached (that would map more).
TEST(AddressSpaceExhausted, MoreFreshThreadsThanReservedRecords) { run_exhausted(1104, false); }

// Threads that took their records before the exhaustion.
TEST(AddressSpaceExhausted, ThreadsThatTouchedLockswapBefore) { run_exhausted(4 * kGroupSize, true); }

}  // namespace
