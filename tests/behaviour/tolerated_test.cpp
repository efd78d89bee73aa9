// tests/behaviour/tolerated_test.cpp — misuse that POSIX leaves undefined but
// glibc 2.36 tolerates, and programs (and test suites such as LTP's) do: a
// stray unlock, an unlock by another thread, destroying or re-initialising a
// locked mutex, destroying a condition variable with a waiter, waiting with
// the mutex not held, one condition variable with two mutexes. Every
// expectation is what glibc 2.36 itself returns (the `glibc` column runs
// it); every native variant must return the same.
#include <errno.h>
#include <pthread.h>
#include <threads.h>

#include <atomic>
#include <thread>

#include "tests/common/test_util.h"

namespace {

using lstest::deadline_in;
using lstest::kGenerousMs;
using lstest::on_other_thread;
using lstest::reached;

constexpr int kAllKinds[] = {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK,
                             PTHREAD_MUTEX_ADAPTIVE_NP};
// The kinds without an owner check: glibc's unlock just releases them.
constexpr int kUncheckedKinds[] = {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ADAPTIVE_NP};

void init_kind(pthread_mutex_t* m, int kind) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, kind);
  ASSERT_EQ(pthread_mutex_init(m, &a), 0);
  pthread_mutexattr_destroy(&a);
}

int timedlock_in(pthread_mutex_t* m, int64_t ms) {
  timespec d = deadline_in(CLOCK_REALTIME, ms);
  return pthread_mutex_timedlock(m, &d);
}

// The mutex works: a timed lock (which must not time out), try and plain
// lock, each released again.
void expect_usable(pthread_mutex_t* m, const char* what) {
  EXPECT_EQ(timedlock_in(m, 1000), 0) << what;
  EXPECT_EQ(pthread_mutex_unlock(m), 0) << what;
  EXPECT_EQ(pthread_mutex_trylock(m), 0) << what;
  EXPECT_EQ(pthread_mutex_unlock(m), 0) << what;
  EXPECT_EQ(pthread_mutex_lock(m), 0) << what;
  EXPECT_EQ(pthread_mutex_unlock(m), 0) << what;
}

TEST(StrayUnlock, UnlockingAnUnlockedMutexLeavesItUsable) {
  for (int kind : kUncheckedKinds) {
    pthread_mutex_t m;
    init_kind(&m, kind);
    EXPECT_EQ(pthread_mutex_unlock(&m), 0) << "kind " << kind;
    expect_usable(&m, "after one stray unlock");
    EXPECT_EQ(pthread_mutex_unlock(&m), 0) << "kind " << kind;
    expect_usable(&m, "after two stray unlocks");
    // glibc counts users (__nusers: +1 per lock, -1 per unlock); a stray
    // unlock leaves it non-zero, and destroy refuses until re-initialised.
    EXPECT_EQ(pthread_mutex_destroy(&m), EBUSY) << "kind " << kind;
    expect_usable(&m, "after destroy said EBUSY");
    init_kind(&m, kind);
    EXPECT_EQ(pthread_mutex_destroy(&m), 0) << "kind " << kind;
  }
  pthread_mutex_t s = PTHREAD_MUTEX_INITIALIZER;
  EXPECT_EQ(pthread_mutex_unlock(&s), 0);
  expect_usable(&s, "static initializer");
}

TEST(StrayUnlock, C11PlainMtxToo) {
  mtx_t m;
  ASSERT_EQ(mtx_init(&m, mtx_plain), thrd_success);
  EXPECT_EQ(mtx_unlock(&m), thrd_success);
  timespec d = deadline_in(CLOCK_REALTIME, 1000);
  EXPECT_EQ(mtx_timedlock(&m, &d), thrd_success);
  EXPECT_EQ(mtx_unlock(&m), thrd_success);
  EXPECT_EQ(mtx_trylock(&m), thrd_success);
  EXPECT_EQ(mtx_unlock(&m), thrd_success);
}

TEST(StrayUnlock, OwnerCheckingKindsRefuseIt) {
  for (int kind : {PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK}) {
    pthread_mutex_t m;
    init_kind(&m, kind);
    EXPECT_EQ(pthread_mutex_unlock(&m), EPERM) << "kind " << kind;
    {
      lstest::Holder h([&] { return pthread_mutex_lock(&m); }, [&] { return pthread_mutex_unlock(&m); });
      EXPECT_EQ(pthread_mutex_unlock(&m), EPERM) << "kind " << kind;
      EXPECT_EQ(on_other_thread([&] { return pthread_mutex_trylock(&m); }), EBUSY) << "kind " << kind;
      EXPECT_EQ(h.release(), 0);
    }
    expect_usable(&m, "owner-checking kind");
    EXPECT_EQ(pthread_mutex_destroy(&m), 0) << "kind " << kind;
  }
}

TEST(StrayUnlock, UnlockByAnotherThreadReleasesTheMutex) {
  for (int kind : kUncheckedKinds) {
    pthread_mutex_t m;
    init_kind(&m, kind);
    {
      lstest::Holder h([&] { return pthread_mutex_lock(&m); }, [] { return 0; });
      EXPECT_EQ(pthread_mutex_unlock(&m), 0) << "kind " << kind;
      EXPECT_EQ(pthread_mutex_trylock(&m), 0) << "kind " << kind << ": not released";
      EXPECT_EQ(pthread_mutex_unlock(&m), 0);
    }
    expect_usable(&m, "after an unlock by another thread");
    EXPECT_EQ(pthread_mutex_destroy(&m), 0) << "kind " << kind << ": every lock had its unlock";
  }
}

TEST(StrayUnlock, UnlockByAnotherThreadHandsTheMutexToAWaiter) {
  for (int kind : kUncheckedKinds) {
    pthread_mutex_t m;
    init_kind(&m, kind);
    lstest::Holder h([&] { return pthread_mutex_lock(&m); }, [] { return 0; });
    std::atomic<int> rc{-1};
    std::atomic<pid_t> tid{0};
    lstest::PThread waiter([&] {
      tid = lstest::current_tid();
      int r = timedlock_in(&m, kGenerousMs);
      if (r == 0) pthread_mutex_unlock(&m);
      rc = r;
    });
    EXPECT_TRUE(lstest::eventually([&] { return tid.load() != 0; }));
    lstest::settle_until_blocked(tid.load());
    EXPECT_EQ(pthread_mutex_unlock(&m), 0) << "kind " << kind;
    waiter.join_or_die();
    EXPECT_EQ(rc.load(), 0) << "kind " << kind << ": " << lstest::err_name(rc.load());
    EXPECT_EQ(h.release(), 0);
    expect_usable(&m, "after handing it to a waiter");
    EXPECT_EQ(pthread_mutex_destroy(&m), 0) << "kind " << kind;
  }
}

TEST(DestroyLocked, IsEbusyAndTheMutexStaysUsableUntilDestroyed) {
  for (int kind : kAllKinds) {
    pthread_mutex_t m;
    init_kind(&m, kind);
    ASSERT_EQ(pthread_mutex_lock(&m), 0);
    EXPECT_EQ(pthread_mutex_destroy(&m), EBUSY) << "kind " << kind;
    EXPECT_EQ(pthread_mutex_unlock(&m), 0) << "kind " << kind;
    expect_usable(&m, "after destroy said EBUSY");
    EXPECT_EQ(pthread_mutex_destroy(&m), 0) << "kind " << kind;
    // A destroyed mutex: every call is EINVAL, a second destroy is 0.
    EXPECT_EQ(pthread_mutex_lock(&m), EINVAL) << "kind " << kind;
    EXPECT_EQ(pthread_mutex_trylock(&m), EINVAL) << "kind " << kind;
    EXPECT_EQ(timedlock_in(&m, 10), EINVAL) << "kind " << kind;
    EXPECT_EQ(pthread_mutex_unlock(&m), EINVAL) << "kind " << kind;
    EXPECT_EQ(pthread_mutex_destroy(&m), 0) << "kind " << kind;
  }
}

TEST(Reinit, InitOfALockedMutexLeavesItUnlocked) {
  for (int kind : kAllKinds) {
    pthread_mutex_t m;
    init_kind(&m, kind);
    ASSERT_EQ(pthread_mutex_lock(&m), 0);
    init_kind(&m, kind);
    EXPECT_EQ(on_other_thread([&] {
                int r = pthread_mutex_trylock(&m);
                if (r == 0) pthread_mutex_unlock(&m);
                return r;
              }),
              0)
        << "kind " << kind;
    expect_usable(&m, "after re-init");
    EXPECT_EQ(pthread_mutex_destroy(&m), 0) << "kind " << kind;
  }
}

TEST(CondTolerated, DestroyWaitsForATimedWaiterToLeave) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c;
  ASSERT_EQ(pthread_cond_init(&c, nullptr), 0);
  timespec deadline = deadline_in(CLOCK_REALTIME, 200);
  std::atomic<int> rc{-1};
  std::atomic<pid_t> tid{0};
  lstest::PThread waiter([&] {
    pthread_mutex_lock(&m);
    tid = lstest::current_tid();
    rc = pthread_cond_timedwait(&c, &m, &deadline);
    pthread_mutex_unlock(&m);
  });
  EXPECT_TRUE(lstest::eventually([&] { return tid.load() != 0; }));
  lstest::settle_until_blocked(tid.load());
  EXPECT_EQ(pthread_cond_destroy(&c), 0);
  EXPECT_TRUE(reached(CLOCK_REALTIME, deadline)) << "destroy returned while the waiter was still waiting";
  waiter.join_or_die();
  EXPECT_EQ(rc.load(), ETIMEDOUT);
}

TEST(CondTolerated, WaitWithTheMutexNotHeldReturnsHoldingIt) {
  pthread_mutex_t m;
  ASSERT_EQ(pthread_mutex_init(&m, nullptr), 0);
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  timespec past = deadline_in(CLOCK_REALTIME, 0);
  EXPECT_EQ(pthread_cond_timedwait(&c, &m, &past), ETIMEDOUT);
  EXPECT_EQ(on_other_thread([&] { return pthread_mutex_trylock(&m); }), EBUSY) << "the wait re-took the mutex";
  EXPECT_EQ(pthread_mutex_unlock(&m), 0);
  expect_usable(&m, "after a wait without holding it");
  // The wait released a mutex nobody held: glibc's user count is off by one.
  EXPECT_EQ(pthread_mutex_destroy(&m), EBUSY);
}

TEST(CondTolerated, OneConditionVariableWithTwoMutexes) {
  pthread_mutex_t ma = PTHREAD_MUTEX_INITIALIZER, mb = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  std::atomic<bool> go{false};
  std::atomic<int> woken{0};
  std::atomic<pid_t> tids[2] = {0, 0};
  auto wait_on = [&](pthread_mutex_t* m, int i) {
    pthread_mutex_lock(m);
    tids[i] = lstest::current_tid();
    while (!go) pthread_cond_wait(&c, m);
    pthread_mutex_unlock(m);
    ++woken;
  };
  lstest::PThread a([&] { wait_on(&ma, 0); });
  lstest::PThread b([&] { wait_on(&mb, 1); });
  for (auto& t : tids) {
    EXPECT_TRUE(lstest::eventually([&] { return t.load() != 0; }));
    lstest::settle_until_blocked(t.load());
  }
  pthread_mutex_lock(&ma);
  pthread_mutex_lock(&mb);
  go = true;
  EXPECT_EQ(pthread_cond_broadcast(&c), 0);
  pthread_mutex_unlock(&mb);
  pthread_mutex_unlock(&ma);
  a.join_or_die();
  b.join_or_die();
  EXPECT_EQ(woken.load(), 2);
  EXPECT_EQ(pthread_cond_destroy(&c), 0);
}

}  // namespace
