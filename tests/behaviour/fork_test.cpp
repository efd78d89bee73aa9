// tests/behaviour/fork_test.cpp — locks across fork(): the child inherits
// every object but only the forking thread. Objects that were free stay
// usable; a normal mutex held by the forking thread can be unlocked and
// re-locked by the child even when other parent threads were queued on it
// (their waiter records are ghosts in the child); errorcheck/recursive
// ownership is by TID, which the child does not share with the parent.
#include <errno.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "tests/common/test_util.h"

namespace {

using lstest::deadline_in;
using lstest::kGenerousMs;
using lstest::kShortMs;
using lstest::PThread;
using lstest::reached;
using lstest::run_in_child;

// A condvar round trip inside the child: a new thread waits, the child's
// main thread signals.
void child_cond_round_trip(pthread_mutex_t* m, pthread_cond_t* c) {
  bool flag = false;
  int waiting = 0, rc = -1;
  std::thread t([&] {
    pthread_mutex_lock(m);
    ++waiting;
    while (!flag) {
      timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
      rc = pthread_cond_timedwait(c, m, &d);
      if (rc != 0) break;
    }
    pthread_mutex_unlock(m);
  });
  for (;;) {
    pthread_mutex_lock(m);
    if (waiting == 1) break;
    pthread_mutex_unlock(m);
    usleep(1000);
  }
  flag = true;
  CHILD_EXPECT_EQ(pthread_cond_signal(c), 0);
  CHILD_EXPECT_EQ(pthread_mutex_unlock(m), 0);
  t.join();
  CHILD_EXPECT_EQ(rc, 0);
  // And a timeout, with the mutex re-acquired.
  CHILD_EXPECT_EQ(pthread_mutex_lock(m), 0);
  timespec d = deadline_in(CLOCK_REALTIME, 10);
  CHILD_EXPECT_EQ(pthread_cond_timedwait(c, m, &d), ETIMEDOUT);
  CHILD_EXPECT_EQ(pthread_mutex_unlock(m), 0);
}

// Uses a lock once under contention (so that its waiter state and per-thread
// records exist): `hold` here, `other_take` (by default `hold`) and `release`
// on another thread meanwhile, `release` here after 2 ms.
void contend_once(const std::function<int()>& hold, const std::function<int()>& release,
                  const std::function<int()>& other_take = {}) {
  ASSERT_EQ(hold(), 0);
  std::thread t([&] {
    (other_take ? other_take : hold)();
    release();
  });
  usleep(2000);
  ASSERT_EQ(release(), 0);
  t.join();
}

TEST(Fork, ObjectsFreeAtForkWorkInTheChild) {
  pthread_mutex_t normal = PTHREAD_MUTEX_INITIALIZER, recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP,
                  errorcheck = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP,
                  adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP, inited;
  ASSERT_EQ(lstest::init_mutex_of_type(&inited, PTHREAD_MUTEX_ERRORCHECK), 0);
  pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER, rw_wn = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  // Use everything once in the parent first (contended, so waiter state and
  // per-thread records exist).
  for (pthread_mutex_t* m : {&normal, &recursive, &errorcheck, &adaptive, &inited}) {
    ASSERT_NO_FATAL_FAILURE(contend_once([m] { return pthread_mutex_lock(m); },
                                         [m] { return pthread_mutex_unlock(m); }));
  }
  for (pthread_rwlock_t* l : {&rw, &rw_wn}) {
    ASSERT_NO_FATAL_FAILURE(contend_once([l] { return pthread_rwlock_rdlock(l); },
                                         [l] { return pthread_rwlock_unlock(l); },
                                         [l] { return pthread_rwlock_wrlock(l); }));
  }
  int rc = run_in_child([&] {
    for (pthread_mutex_t* m : {&normal, &recursive, &errorcheck, &adaptive, &inited}) {
      CHILD_EXPECT_EQ(pthread_mutex_lock(m), 0);
      CHILD_EXPECT_EQ(pthread_mutex_unlock(m), 0);
      CHILD_EXPECT_EQ(pthread_mutex_trylock(m), 0);
      CHILD_EXPECT_EQ(pthread_mutex_unlock(m), 0);
    }
    CHILD_EXPECT_EQ(pthread_mutex_lock(&errorcheck), 0);
    CHILD_EXPECT_EQ(pthread_mutex_lock(&errorcheck), EDEADLK);
    CHILD_EXPECT_EQ(pthread_mutex_unlock(&errorcheck), 0);
    lstest_check_recursive_mutex(&recursive, lstest::child_rc, nullptr);
    for (pthread_rwlock_t* l : {&rw, &rw_wn}) {
      lstest_check_rwlock_owner(l, lstest::child_rc, nullptr);
      // Contended in the child.
      CHILD_EXPECT_EQ(pthread_rwlock_wrlock(l), 0);
      std::thread t([l] {
        CHILD_EXPECT_EQ(pthread_rwlock_rdlock(l), 0);
        CHILD_EXPECT_EQ(pthread_rwlock_unlock(l), 0);
      });
      usleep(2000);
      CHILD_EXPECT_EQ(pthread_rwlock_unlock(l), 0);
      t.join();
    }
    child_cond_round_trip(&normal, &c);
    child_cond_round_trip(&inited, &c);
  });
  EXPECT_EQ(rc, 0);
  // The parent's objects are unaffected.
  EXPECT_EQ(pthread_mutex_trylock(&normal), 0);
  EXPECT_EQ(pthread_mutex_unlock(&normal), 0);
  EXPECT_EQ(pthread_mutex_destroy(&inited), 0);
}

TEST(Fork, NormalMutexHeldByTheForkingThreadCanBeUnlockedAndRelockedInTheChild) {
  for (int type : {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ADAPTIVE_NP}) {
    pthread_mutex_t m;
    ASSERT_EQ(lstest::init_mutex_of_type(&m, type), 0);
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    ASSERT_EQ(pthread_mutex_lock(&m), 0);
    int rc = run_in_child([&] {
      CHILD_EXPECT_EQ(pthread_mutex_trylock(&m), EBUSY);
      CHILD_EXPECT_EQ(pthread_mutex_unlock(&m), 0);
      CHILD_EXPECT_EQ(pthread_mutex_lock(&m), 0);
      CHILD_EXPECT_EQ(pthread_mutex_unlock(&m), 0);
      child_cond_round_trip(&m, &c);
    });
    EXPECT_EQ(rc, 0) << "type " << type;
    EXPECT_EQ(pthread_mutex_unlock(&m), 0);
    EXPECT_EQ(pthread_mutex_destroy(&m), 0);
  }
}

// Parent threads queued on the mutex (and waiting in a condvar) at fork time
// leave ghost waiter records behind in the child.
TEST(Fork, HeldMutexWithQueuedParentThreadsStillWorksInTheChild) {
  constexpr int kQueued = 3;
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  pthread_cond_t free_c = PTHREAD_COND_INITIALIZER;
  bool cond_go = false;
  int cond_waiting = 0;
  ASSERT_EQ(pthread_mutex_lock(&m), 0);
  std::vector<std::unique_ptr<PThread>> queued;
  std::vector<pid_t> tids(kQueued);
  std::atomic<int> started{0};
  for (int i = 0; i < kQueued; ++i) {
    queued.push_back(std::make_unique<PThread>([&, i] {
      tids[i] = lstest::current_tid();
      ++started;
      EXPECT_EQ(pthread_mutex_lock(&m), 0);
      EXPECT_EQ(pthread_mutex_unlock(&m), 0);
    }));
  }
  // Condvar waiters in the parent, too.
  std::vector<std::unique_ptr<PThread>> cond_waiters;
  for (int i = 0; i < 2; ++i) {
    cond_waiters.push_back(std::make_unique<PThread>([&] {
      pthread_mutex_lock(&cm);
      ++cond_waiting;
      while (!cond_go) pthread_cond_wait(&c, &cm);
      pthread_mutex_unlock(&cm);
    }));
  }
  while (started.load() < kQueued) usleep(1000);
  for (pid_t t : tids) lstest::settle_until_blocked(t);
  for (;;) {
    pthread_mutex_lock(&cm);
    bool all = cond_waiting == 2;
    pthread_mutex_unlock(&cm);
    if (all) break;
    usleep(1000);
  }
  int rc = run_in_child([&] {
    CHILD_EXPECT_EQ(pthread_mutex_unlock(&m), 0);
    CHILD_EXPECT_EQ(pthread_mutex_lock(&m), 0);
    CHILD_EXPECT_EQ(pthread_mutex_unlock(&m), 0);
    // Contended in the child: a new thread and the child's main thread.
    CHILD_EXPECT_EQ(pthread_mutex_lock(&m), 0);
    std::thread t([&] {
      CHILD_EXPECT_EQ(pthread_mutex_lock(&m), 0);
      CHILD_EXPECT_EQ(pthread_mutex_unlock(&m), 0);
    });
    usleep(5000);
    CHILD_EXPECT_EQ(pthread_mutex_unlock(&m), 0);
    t.join();
    CHILD_EXPECT_EQ(pthread_mutex_trylock(&m), 0);
    CHILD_EXPECT_EQ(pthread_mutex_unlock(&m), 0);
    // A condvar that was free at fork, with the mutex that had ghosts. (The
    // condvar with ghost waiters is not touched: glibc's signal can wait for
    // its ghosts to leave their group forever.)
    child_cond_round_trip(&m, &free_c);
  });
  EXPECT_EQ(rc, 0);
  // Parent: everything proceeds as if nothing happened.
  EXPECT_EQ(pthread_mutex_unlock(&m), 0);
  for (auto& q : queued) q->join_or_die();
  pthread_mutex_lock(&cm);
  cond_go = true;
  pthread_cond_broadcast(&c);
  pthread_mutex_unlock(&cm);
  for (auto& w : cond_waiters) w->join_or_die();
}

// glibc records the owner's TID; the child's thread has a new TID, so it is
// not the owner of an errorcheck/recursive mutex its parent thread held.
TEST(Fork, ErrorcheckAndRecursiveHeldByTheForkingThreadAreNotOwnedByTheChild) {
  pthread_mutex_t ec, rec;
  ASSERT_EQ(lstest::init_mutex_of_type(&ec, PTHREAD_MUTEX_ERRORCHECK), 0);
  ASSERT_EQ(lstest::init_mutex_of_type(&rec, PTHREAD_MUTEX_RECURSIVE), 0);
  ASSERT_EQ(pthread_mutex_lock(&ec), 0);
  ASSERT_EQ(pthread_mutex_lock(&rec), 0);
  ASSERT_EQ(pthread_mutex_lock(&rec), 0);
  int rc = run_in_child([&] {
    CHILD_EXPECT_EQ(pthread_mutex_unlock(&ec), EPERM);
    CHILD_EXPECT_EQ(pthread_mutex_trylock(&ec), EBUSY);
    timespec d = deadline_in(CLOCK_REALTIME, 20);
    CHILD_EXPECT_EQ(pthread_mutex_timedlock(&ec, &d), ETIMEDOUT);
    CHILD_EXPECT_EQ(pthread_mutex_unlock(&rec), EPERM);
    CHILD_EXPECT_EQ(pthread_mutex_trylock(&rec), EBUSY);
    d = deadline_in(CLOCK_REALTIME, 20);
    CHILD_EXPECT_EQ(pthread_mutex_timedlock(&rec, &d), ETIMEDOUT);
    CHILD_EXPECT_EQ(pthread_mutex_destroy(&ec), EBUSY);
  });
  EXPECT_EQ(rc, 0);
  // Still the parent's.
  EXPECT_EQ(pthread_mutex_lock(&ec), EDEADLK);
  EXPECT_EQ(pthread_mutex_unlock(&ec), 0);
  EXPECT_EQ(pthread_mutex_unlock(&rec), 0);
  EXPECT_EQ(pthread_mutex_unlock(&rec), 0);
  EXPECT_EQ(pthread_mutex_destroy(&ec), 0);
  EXPECT_EQ(pthread_mutex_destroy(&rec), 0);
}

// A lock held by a thread that does not exist in the child stays held.
TEST(Fork, LocksHeldByOtherParentThreadsStayHeldInTheChild) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_rwlock_t wl = PTHREAD_RWLOCK_INITIALIZER, rl = PTHREAD_RWLOCK_INITIALIZER;
  lstest::Holder hm([&] { return pthread_mutex_lock(&m); }, [&] { return pthread_mutex_unlock(&m); });
  lstest::Holder hw([&] { return pthread_rwlock_wrlock(&wl); }, [&] { return pthread_rwlock_unlock(&wl); });
  lstest::Holder hr([&] { return pthread_rwlock_rdlock(&rl); }, [&] { return pthread_rwlock_unlock(&rl); });
  ASSERT_EQ(hm.acquire_rc(), 0);
  ASSERT_EQ(hw.acquire_rc(), 0);
  ASSERT_EQ(hr.acquire_rc(), 0);
  int rc = run_in_child([&] {
    CHILD_EXPECT_EQ(pthread_mutex_trylock(&m), EBUSY);
    timespec d = deadline_in(CLOCK_MONOTONIC, 20);
    CHILD_EXPECT_EQ(pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &d), ETIMEDOUT);
    CHILD_EXPECT_EQ(pthread_rwlock_tryrdlock(&wl), EBUSY);
    CHILD_EXPECT_EQ(pthread_rwlock_trywrlock(&wl), EBUSY);
    d = deadline_in(CLOCK_MONOTONIC, 20);
    CHILD_EXPECT_EQ(pthread_rwlock_clockrdlock(&wl, CLOCK_MONOTONIC, &d), ETIMEDOUT);
    CHILD_EXPECT_EQ(pthread_rwlock_trywrlock(&rl), EBUSY);
    CHILD_EXPECT_EQ(pthread_rwlock_tryrdlock(&rl), 0);
    CHILD_EXPECT_EQ(pthread_rwlock_unlock(&rl), 0);
  });
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(hm.release(), 0);
  EXPECT_EQ(hw.release(), 0);
  EXPECT_EQ(hr.release(), 0);
}

}  // namespace
