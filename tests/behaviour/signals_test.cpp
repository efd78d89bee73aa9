// tests/behaviour/signals_test.cpp — a signal handled while a thread sleeps in
// a lock must not make the acquisition fail: POSIX forbids EINTR from the
// mutex and rwlock functions, and a condition wait interrupted by a handler
// either resumes or returns 0 (a spurious wakeup), never EINTR. The handler
// is installed without SA_RESTART so the kernel does report EINTR to
// lockswap's futex waits.
#include <errno.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <functional>
#include <string>

#include "tests/behaviour/test_util.h"

namespace {

using lstest::deadline_in;
using lstest::kGenerousMs;

std::atomic<int> g_handled{0};
void on_usr1(int) { g_handled.fetch_add(1, std::memory_order_relaxed); }

class SignalTest : public testing::Test {
 protected:
  void SetUp() override {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART
    ASSERT_EQ(sigaction(SIGUSR1, &sa, &old_), 0);
    g_handled = 0;
  }
  void TearDown() override { sigaction(SIGUSR1, &old_, nullptr); }

  // Starts `blocked_op` on a thread (it must block until `release` runs),
  // pelts that thread with SIGUSR1 while it sleeps, then runs `release` and
  // returns the blocked operation's result.
  int pelt(const std::function<int()>& blocked_op, const std::function<void()>& release) {
    lstest::Sem started;
    std::atomic<pid_t> tid{0};
    std::atomic<int> rc{-1};
    std::atomic<bool> done{false};
    lstest::PThread t([&] {
      tid = lstest::current_tid();
      started.post();
      rc = blocked_op();
      done = true;
    });
    EXPECT_TRUE(started.wait());
    lstest::settle_until_blocked(tid);
    for (int i = 0; i < 25 && !done; ++i) {
      pthread_kill(t.handle(), SIGUSR1);
      usleep(2000);
    }
    EXPECT_FALSE(done.load()) << "the blocked operation returned early: " << lstest::err_name(rc.load());
    release();
    t.join_or_die();
    EXPECT_GT(g_handled.load(), 0) << "no signal was delivered";
    return rc;
  }

  struct sigaction old_;
};

TEST_F(SignalTest, MutexLockIsNotInterrupted) {
  for (int type : {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK,
                   PTHREAD_MUTEX_ADAPTIVE_NP}) {
    pthread_mutex_t m;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, type);
    ASSERT_EQ(pthread_mutex_init(&m, &a), 0);
    pthread_mutexattr_destroy(&a);
    for (int op = 0; op < 3; ++op) {
      ASSERT_EQ(pthread_mutex_lock(&m), 0);
      int rc = pelt(
          [&] {
            timespec d = deadline_in(op == 1 ? CLOCK_REALTIME : CLOCK_MONOTONIC, kGenerousMs);
            int r = op == 0   ? pthread_mutex_lock(&m)
                    : op == 1 ? pthread_mutex_timedlock(&m, &d)
                              : pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &d);
            if (r == 0) pthread_mutex_unlock(&m);
            return r;
          },
          [&] { pthread_mutex_unlock(&m); });
      EXPECT_EQ(rc, 0) << "type " << type << " op " << op << ": " << lstest::err_name(rc);
    }
    EXPECT_EQ(pthread_mutex_destroy(&m), 0);
  }
}

TEST_F(SignalTest, RwlockAcquisitionsAreNotInterrupted) {
  for (int kind : {PTHREAD_RWLOCK_PREFER_READER_NP, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP}) {
    pthread_rwlock_t l;
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, kind);
    ASSERT_EQ(pthread_rwlock_init(&l, &a), 0);
    pthread_rwlockattr_destroy(&a);
    struct Case {
      const char* name;
      bool hold_write;  // what the main thread holds while the other one waits
      std::function<int()> op;
    };
    const Case cases[] = {
        {"rdlock vs writer", true, [&] { return pthread_rwlock_rdlock(&l); }},
        {"wrlock vs writer", true, [&] { return pthread_rwlock_wrlock(&l); }},
        {"wrlock vs reader", false, [&] { return pthread_rwlock_wrlock(&l); }},
        {"timedrdlock vs writer", true,
         [&] {
           timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
           return pthread_rwlock_timedrdlock(&l, &d);
         }},
        {"clockwrlock vs reader", false,
         [&] {
           timespec d = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
           return pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &d);
         }},
    };
    for (const Case& c : cases) {
      ASSERT_EQ(c.hold_write ? pthread_rwlock_wrlock(&l) : pthread_rwlock_rdlock(&l), 0);
      int rc = pelt(
          [&] {
            int r = c.op();
            if (r == 0) pthread_rwlock_unlock(&l);
            return r;
          },
          [&] { pthread_rwlock_unlock(&l); });
      EXPECT_EQ(rc, 0) << "kind " << kind << ", " << c.name << ": " << lstest::err_name(rc);
    }
    EXPECT_EQ(pthread_rwlock_destroy(&l), 0);
  }
}

TEST_F(SignalTest, ConditionWaitsNeverReturnEintr) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  for (int op = 0; op < 3; ++op) {
    bool flag = false;
    std::atomic<int> bad{0};
    int rc = pelt(
        [&] {
          pthread_mutex_lock(&m);
          while (!flag) {
            timespec d = deadline_in(op == 2 ? CLOCK_MONOTONIC : CLOCK_REALTIME, kGenerousMs);
            int r = op == 0   ? pthread_cond_wait(&c, &m)
                    : op == 1 ? pthread_cond_timedwait(&c, &m, &d)
                              : pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &d);
            if (r != 0) {
              bad = r;
              break;
            }
          }
          pthread_mutex_unlock(&m);
          return bad.load();
        },
        [&] {
          pthread_mutex_lock(&m);
          flag = true;
          pthread_cond_signal(&c);
          pthread_mutex_unlock(&m);
        });
    EXPECT_EQ(rc, 0) << "op " << op << ": " << lstest::err_name(rc);
  }
}

}  // namespace
