// tests/behaviour/delegated_test.cpp — objects glibc must own (robust,
// priority-inherit, priority-protect, process-shared) keep glibc's behaviour
// under every variant: lockswap recognises them and delegates.
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "tests/common/test_util.h"

namespace {

using namespace lstest;  // clocks, deadlines, on_other_thread

struct MutexAttrs {
  int type = PTHREAD_MUTEX_NORMAL;
  int robust = PTHREAD_MUTEX_STALLED;
  int protocol = PTHREAD_PRIO_NONE;
  int pshared = PTHREAD_PROCESS_PRIVATE;
  int ceiling = -1;
};

int init_mutex(pthread_mutex_t* m, const MutexAttrs& a) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  int rc = pthread_mutexattr_settype(&attr, a.type);
  if (rc == 0) rc = pthread_mutexattr_setrobust(&attr, a.robust);
  if (rc == 0) rc = pthread_mutexattr_setprotocol(&attr, a.protocol);
  if (rc == 0) rc = pthread_mutexattr_setpshared(&attr, a.pshared);
  if (rc == 0 && a.ceiling >= 0) rc = pthread_mutexattr_setprioceiling(&attr, a.ceiling);
  if (rc == 0) rc = pthread_mutex_init(m, &attr);
  pthread_mutexattr_destroy(&attr);
  return rc;
}

// fork() for a child that runs plain code and ends in _exit: stdout is
// flushed first (no output twice), and the child gets a SIGALRM watchdog of
// its own (a deadlock there kills it instead of hanging the test).
pid_t fork_with_watchdog(unsigned seconds = 20) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGALRM, SIG_DFL);
    alarm(seconds);
  }
  return pid;
}

int other_trylock(pthread_mutex_t* m) {
  return on_other_thread([m] {
    int rc = pthread_mutex_trylock(m);
    if (rc == 0) pthread_mutex_unlock(m);
    return rc;
  });
}

// ----------------------------------------------------------------- robust

// A robust mutex of the parameter's type (each test destroys it: destroy's
// result is part of what it checks).
class RobustTest : public testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    MutexAttrs a;
    a.type = GetParam();
    a.robust = PTHREAD_MUTEX_ROBUST;
    ASSERT_EQ(init_mutex(&m_, a), 0);
  }
  pthread_mutex_t m_;
};

TEST_P(RobustTest, OwnerExitingWhileHoldingItGivesEownerdeadThenConsistentRepairsIt) {
  EXPECT_EQ(pthread_mutex_consistent(&m_), EINVAL) << "not inconsistent yet";
  std::thread([&] { EXPECT_EQ(pthread_mutex_lock(&m_), 0); }).join();  // dies holding it
  EXPECT_EQ(pthread_mutex_lock(&m_), EOWNERDEAD);
  EXPECT_EQ(pthread_mutex_consistent(&m_), 0);
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
  EXPECT_EQ(pthread_mutex_lock(&m_), 0);
  EXPECT_EQ(other_trylock(&m_), EBUSY);
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
  EXPECT_EQ(pthread_mutex_destroy(&m_), 0);
}

TEST_P(RobustTest, UnlockWithoutConsistentMakesItUnrecoverable) {
  std::thread([&] { EXPECT_EQ(pthread_mutex_lock(&m_), 0); }).join();
  timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
  EXPECT_EQ(pthread_mutex_timedlock(&m_, &d), EOWNERDEAD);
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
  EXPECT_EQ(pthread_mutex_lock(&m_), ENOTRECOVERABLE);
  EXPECT_EQ(pthread_mutex_trylock(&m_), ENOTRECOVERABLE);
  EXPECT_EQ(pthread_mutex_destroy(&m_), 0);
}

TEST_P(RobustTest, KindSemanticsAreGlibcs) {
  ASSERT_EQ(pthread_mutex_lock(&m_), 0);
  EXPECT_EQ(other_trylock(&m_), EBUSY);
  switch (GetParam()) {
    case PTHREAD_MUTEX_ERRORCHECK:
      EXPECT_EQ(pthread_mutex_lock(&m_), EDEADLK);
      EXPECT_EQ(pthread_mutex_trylock(&m_), EDEADLK) << "robust errorcheck trylock checks the owner";
      break;
    case PTHREAD_MUTEX_RECURSIVE:
      EXPECT_EQ(pthread_mutex_trylock(&m_), 0);
      EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
      break;
    default:
      EXPECT_EQ(pthread_mutex_trylock(&m_), EBUSY);
  }
  // Robust mutexes check the owner for every kind.
  EXPECT_EQ(on_other_thread([&] { return pthread_mutex_unlock(&m_); }), EPERM);
  timespec d = deadline_in(CLOCK_MONOTONIC, kShortMs);
  EXPECT_EQ(on_other_thread([&] { return pthread_mutex_clocklock(&m_, CLOCK_MONOTONIC, &d); }), ETIMEDOUT);
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
  EXPECT_EQ(pthread_mutex_unlock(&m_), EPERM);
  EXPECT_EQ(pthread_mutex_destroy(&m_), 0);
}

INSTANTIATE_TEST_SUITE_P(Kinds, RobustTest,
                         testing::Values(PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK),
                         [](const testing::TestParamInfo<int>& i) {
                           return i.param == PTHREAD_MUTEX_NORMAL      ? "Normal"
                                  : i.param == PTHREAD_MUTEX_RECURSIVE ? "Recursive"
                                                                       : "Errorcheck";
                         });

TEST(MutexConsistent, NonRobustMutexIsEinval) {
  pthread_mutex_t normal = PTHREAD_MUTEX_INITIALIZER, ec = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
  EXPECT_EQ(pthread_mutex_consistent(&normal), EINVAL);
  EXPECT_EQ(pthread_mutex_consistent(&ec), EINVAL);
  ASSERT_EQ(pthread_mutex_lock(&normal), 0);
  EXPECT_EQ(pthread_mutex_consistent(&normal), EINVAL);
  EXPECT_EQ(pthread_mutex_unlock(&normal), 0);
  pthread_mutex_t inited;
  ASSERT_EQ(init_mutex(&inited, MutexAttrs{}), 0);
  EXPECT_EQ(pthread_mutex_consistent(&inited), EINVAL);
  EXPECT_EQ(pthread_mutex_destroy(&inited), 0);
}

// ------------------------------------------------------- priority inherit

TEST(PriorityInherit, LockTrylockTimedlockUnlockBehaveAsGlibc) {
  for (int type : {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ERRORCHECK, PTHREAD_MUTEX_RECURSIVE}) {
    pthread_mutex_t m;
    MutexAttrs a;
    a.type = type;
    a.protocol = PTHREAD_PRIO_INHERIT;
    ASSERT_EQ(init_mutex(&m, a), 0);
    ASSERT_EQ(pthread_mutex_lock(&m), 0) << type;
    EXPECT_EQ(other_trylock(&m), EBUSY) << type;
    timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
    EXPECT_EQ(on_other_thread([&] { return pthread_mutex_timedlock(&m, &d); }), ETIMEDOUT) << type;
    if (type == PTHREAD_MUTEX_ERRORCHECK) { EXPECT_EQ(pthread_mutex_lock(&m), EDEADLK); }
    if (type == PTHREAD_MUTEX_RECURSIVE) {
      EXPECT_EQ(pthread_mutex_lock(&m), 0);
      EXPECT_EQ(pthread_mutex_unlock(&m), 0);
    }
    if (type != PTHREAD_MUTEX_NORMAL) {
      EXPECT_EQ(on_other_thread([&] { return pthread_mutex_unlock(&m); }), EPERM) << type;
    }
    EXPECT_EQ(pthread_mutex_destroy(&m), EBUSY) << type;
    EXPECT_EQ(pthread_mutex_unlock(&m), 0) << type;
    EXPECT_EQ(other_trylock(&m), 0) << type;
    EXPECT_EQ(pthread_mutex_destroy(&m), 0) << type;
  }
}

TEST(PriorityInherit, ContendedCounterStaysExact) {
  pthread_mutex_t m;
  MutexAttrs a;
  a.protocol = PTHREAD_PRIO_INHERIT;
  ASSERT_EQ(init_mutex(&m, a), 0);
  long counter = 0;
  constexpr int kThreads = 3, kIters = 3000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < kIters; ++i) {
        ASSERT_EQ(pthread_mutex_lock(&m), 0);
        ++counter;
        ASSERT_EQ(pthread_mutex_unlock(&m), 0);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(counter, long{kThreads} * kIters);
  EXPECT_EQ(pthread_mutex_destroy(&m), 0);
}

// ------------------------------------------------------- priority protect

// glibc raises the locking thread to the ceiling with sched_setscheduler; for
// a SCHED_OTHER thread that is refused, so glibc's lock, trylock and
// timedlock return EINVAL (a variant that did not delegate would return 0).
// glibc remembers the requested ceiling per thread even when the change
// failed, so each attempt runs on a fresh thread.
TEST(PriorityProtect, LockingFollowsGlibc) {
  int policy = sched_getscheduler(0);
  if (policy != SCHED_OTHER && policy != SCHED_BATCH && policy != SCHED_IDLE)
    GTEST_SKIP() << "expected results are for a non-realtime test process";
  for (int type : {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ERRORCHECK, PTHREAD_MUTEX_RECURSIVE}) {
    pthread_mutex_t m;
    MutexAttrs a;
    a.type = type;
    a.protocol = PTHREAD_PRIO_PROTECT;
    a.ceiling = sched_get_priority_min(SCHED_FIFO);
    ASSERT_EQ(init_mutex(&m, a), 0);
    int ceiling = -1;
    EXPECT_EQ(pthread_mutex_getprioceiling(&m, &ceiling), 0);
    EXPECT_EQ(ceiling, a.ceiling);
    EXPECT_EQ(on_other_thread([&] { return pthread_mutex_lock(&m); }), EINVAL) << type;
    EXPECT_EQ(on_other_thread([&] { return pthread_mutex_trylock(&m); }), EINVAL) << type;
    EXPECT_EQ(on_other_thread([&] {
                timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
                return pthread_mutex_timedlock(&m, &d);
              }),
              EINVAL)
        << type;
    EXPECT_EQ(on_other_thread([&] {
                timespec d = deadline_in(CLOCK_MONOTONIC, kShortMs);
                return pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &d);
              }),
              EINVAL)
        << type;
    EXPECT_EQ(pthread_mutex_destroy(&m), 0) << type;
  }
}

// --------------------------------------------------------- process-shared

struct SharedBlock {
  pthread_mutex_t m;
  pthread_cond_t c;
  pthread_rwlock_t rw;
  pthread_mutex_t robust;
  int child_waiting;
  int flag;
  long counter;
};

SharedBlock* map_shared() {
  void* p = mmap(nullptr, sizeof(SharedBlock), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<SharedBlock*>(p);
}

int wait_child(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

TEST(ProcessShared, MutexAndCondvarWorkAcrossFork) {
  SharedBlock* s = map_shared();
  ASSERT_NE(s, nullptr);
  MutexAttrs a;
  a.pshared = PTHREAD_PROCESS_SHARED;
  ASSERT_EQ(init_mutex(&s->m, a), 0);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  ASSERT_EQ(pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED), 0);
  ASSERT_EQ(pthread_cond_init(&s->c, &ca), 0);
  pthread_condattr_destroy(&ca);
  constexpr int kIters = 5000;
  pid_t pid = fork_with_watchdog();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int bad = 0;
    for (int i = 0; i < kIters; ++i) {
      bad |= pthread_mutex_lock(&s->m) != 0;
      ++s->counter;
      bad |= pthread_mutex_unlock(&s->m) != 0;
    }
    bad |= pthread_mutex_lock(&s->m) != 0;
    ++s->child_waiting;
    while (!s->flag) {
      timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
      int rc = pthread_cond_timedwait(&s->c, &s->m, &d);
      if (rc != 0) {
        bad |= 2;
        break;
      }
    }
    bad |= (pthread_mutex_trylock(&s->m) != EBUSY) << 2;  // held again after the wait
    bad |= pthread_mutex_unlock(&s->m) != 0;
    _exit(bad);
  }
  for (int i = 0; i < kIters; ++i) {
    ASSERT_EQ(pthread_mutex_lock(&s->m), 0);
    ++s->counter;
    ASSERT_EQ(pthread_mutex_unlock(&s->m), 0);
  }
  for (;;) {
    ASSERT_EQ(pthread_mutex_lock(&s->m), 0);
    if (s->child_waiting == 1) break;
    pthread_mutex_unlock(&s->m);
    usleep(1000);
  }
  EXPECT_EQ(s->counter, 2L * kIters);
  s->flag = 1;
  EXPECT_EQ(pthread_cond_signal(&s->c), 0);
  EXPECT_EQ(pthread_mutex_unlock(&s->m), 0);
  EXPECT_EQ(wait_child(pid), 0);
  EXPECT_EQ(pthread_cond_destroy(&s->c), 0);
  EXPECT_EQ(pthread_mutex_destroy(&s->m), 0);
  munmap(s, sizeof *s);
}

TEST(ProcessShared, RwlockExcludesAcrossFork) {
  SharedBlock* s = map_shared();
  ASSERT_NE(s, nullptr);
  pthread_rwlockattr_t ra;
  pthread_rwlockattr_init(&ra);
  ASSERT_EQ(pthread_rwlockattr_setpshared(&ra, PTHREAD_PROCESS_SHARED), 0);
  ASSERT_EQ(pthread_rwlock_init(&s->rw, &ra), 0);
  pthread_rwlockattr_destroy(&ra);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t pid = fork_with_watchdog();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int bad = pthread_rwlock_wrlock(&s->rw) != 0;
    char b = 'x';
    bad |= write(pipefd[1], &b, 1) != 1;
    usleep(50'000);
    bad |= pthread_rwlock_unlock(&s->rw) != 0;
    _exit(bad);
  }
  char b;
  ASSERT_EQ(read(pipefd[0], &b, 1), 1);
  EXPECT_EQ(pthread_rwlock_tryrdlock(&s->rw), EBUSY);
  EXPECT_EQ(pthread_rwlock_trywrlock(&s->rw), EBUSY);
  timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
  EXPECT_EQ(pthread_rwlock_timedrdlock(&s->rw, &d), 0);
  EXPECT_EQ(pthread_rwlock_unlock(&s->rw), 0);
  EXPECT_EQ(wait_child(pid), 0);
  EXPECT_EQ(pthread_rwlock_destroy(&s->rw), 0);
  close(pipefd[0]);
  close(pipefd[1]);
  munmap(s, sizeof *s);
}

TEST(ProcessShared, RobustMutexOfADeadProcessGivesEownerdead) {
  SharedBlock* s = map_shared();
  ASSERT_NE(s, nullptr);
  MutexAttrs a;
  a.pshared = PTHREAD_PROCESS_SHARED;
  a.robust = PTHREAD_MUTEX_ROBUST;
  ASSERT_EQ(init_mutex(&s->robust, a), 0);
  pid_t pid = fork_with_watchdog();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int rc = pthread_mutex_lock(&s->robust);
    _exit(rc == 0 ? 0 : 1);  // exits holding it
  }
  EXPECT_EQ(wait_child(pid), 0);
  EXPECT_EQ(pthread_mutex_lock(&s->robust), EOWNERDEAD);
  EXPECT_EQ(pthread_mutex_consistent(&s->robust), 0);
  EXPECT_EQ(pthread_mutex_unlock(&s->robust), 0);
  EXPECT_EQ(pthread_mutex_trylock(&s->robust), 0);
  EXPECT_EQ(pthread_mutex_unlock(&s->robust), 0);
  EXPECT_EQ(pthread_mutex_destroy(&s->robust), 0);
  munmap(s, sizeof *s);
}

}  // namespace
