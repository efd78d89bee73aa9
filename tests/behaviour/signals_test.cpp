// tests/behaviour/signals_test.cpp — a signal handled while a thread sleeps in
// a lock must not make the acquisition fail: POSIX forbids EINTR from the
// mutex and rwlock functions, and a condition wait interrupted by a handler
// either resumes or returns 0 (a spurious wakeup), never EINTR. The handler
// is installed without SA_RESTART so the kernel does report EINTR to
// lockswap's futex waits.
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <threads.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include "tests/common/test_util.h"

namespace {

using lstest::deadline_in;
using lstest::kGenerousMs;

std::atomic<int> g_handled{0};
void on_usr1(int) { g_handled.fetch_add(1, std::memory_order_relaxed); }

// Installs `handler` for SIGUSR1 without SA_RESTART; the old action goes to `old`.
int install_usr1(void (*handler)(int), struct sigaction* old) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART
  return sigaction(SIGUSR1, &sa, old);
}

class SignalTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(install_usr1(on_usr1, &old_), 0);
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
    ASSERT_EQ(lstest::init_mutex_of_type(&m, type), 0);
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
    ASSERT_EQ(lstest::init_rwlock_of_kind(&l, kind), 0);
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

// A handled signal is not a wake-up: glibc's condition wait goes back to sleep
// after the handler until a signal or broadcast is consumed (or its absolute
// deadline passes), and programs rely on that (a thread pelted with a timer
// signal would otherwise spin through its wait loop). Every flavour, with the
// mutex held and not held (glibc releases and re-takes it all the same), with
// the signals aimed at the process (kill) and at the waiting thread.
enum class Flavour { wait, timedwait, clockwait, cnd_wait, cnd_timedwait };
enum class Aim { process, thread };

std::atomic<pid_t> g_waiter_tid{0};
std::atomic<int> g_handled_by_waiter{0};
void on_usr1_count_waiter(int) {
  if (lstest::current_tid() == g_waiter_tid.load(std::memory_order_relaxed))
    g_handled_by_waiter.fetch_add(1, std::memory_order_relaxed);
}

class CondSignalTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(install_usr1(on_usr1_count_waiter, &old_), 0);
    // Only the waiter takes SIGUSR1, so a process-directed signal reaches it
    // (threads created here inherit this mask; the waiter unblocks it).
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr1, &old_mask_), 0);
    g_handled_by_waiter = 0;
  }
  void TearDown() override {
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    sigaction(SIGUSR1, &old_, nullptr);
  }

  // One wait call of `f` on `cond` (`deadline_ms` from now for the timed
  // flavours) on a thread pelted with SIGUSR1 every 0.5 ms for `pelt_ms`.
  // Then, if `then_signal`, a signal. Returns the wait's result; `early` says
  // whether it returned before that signal was sent.
  int pelted_wait(Flavour f, bool held, Aim aim, int64_t deadline_ms, int64_t pelt_ms, bool then_signal, bool* early) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    mtx_t cm;
    cnd_t cc;
    EXPECT_EQ(mtx_init(&cm, mtx_plain), thrd_success);
    EXPECT_EQ(cnd_init(&cc), thrd_success);
    std::atomic<bool> signalled{false}, done{false}, done_before_signal{false};
    std::atomic<int> rc{-1};
    lstest::Sem started;
    std::thread t([&] {
      sigset_t usr1;
      sigemptyset(&usr1);
      sigaddset(&usr1, SIGUSR1);
      pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr);
      g_waiter_tid = lstest::current_tid();
      bool c11 = f == Flavour::cnd_wait || f == Flavour::cnd_timedwait;
      if (held) c11 ? mtx_lock(&cm) : pthread_mutex_lock(&m);
      clockid_t clock = f == Flavour::clockwait ? CLOCK_MONOTONIC : CLOCK_REALTIME;
      timespec d = deadline_in(clock, deadline_ms);
      started.post();
      int r;
      switch (f) {
        case Flavour::wait: r = pthread_cond_wait(&c, &m); break;
        case Flavour::timedwait: r = pthread_cond_timedwait(&c, &m, &d); break;
        case Flavour::clockwait: r = pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &d); break;
        case Flavour::cnd_wait: r = cnd_wait(&cc, &cm) == thrd_success ? 0 : EINVAL; break;
        default: {
          int c11rc = cnd_timedwait(&cc, &cm, &d);
          r = c11rc == thrd_success ? 0 : c11rc == thrd_timedout ? ETIMEDOUT : EINVAL;
        }
      }
      done_before_signal = !signalled.load();
      if (r == ETIMEDOUT && !lstest::reached(clock, d)) r = -2;  // timed out before its deadline
      rc = r;
      done = true;
      c11 ? mtx_unlock(&cm) : pthread_mutex_unlock(&m);  // the wait re-took it, held or not before
    });
    EXPECT_TRUE(started.wait());
    lstest::settle_until_blocked(g_waiter_tid.load());
    pthread_t waiter = t.native_handle();
    int64_t end = lstest::now_ns(CLOCK_MONOTONIC) + pelt_ms * 1'000'000;
    while (lstest::now_ns(CLOCK_MONOTONIC) < end && !done) {
      aim == Aim::process ? kill(getpid(), SIGUSR1) : pthread_kill(waiter, SIGUSR1);
      usleep(500);
    }
    if (then_signal) {
      signalled = true;
      if (f == Flavour::cnd_wait || f == Flavour::cnd_timedwait)
        cnd_signal(&cc);
      else
        pthread_cond_signal(&c);
    }
    t.join();
    *early = done_before_signal.load();
    EXPECT_GT(g_handled_by_waiter.load(), 0) << "no signal reached the waiter";
    g_waiter_tid = 0;
    cnd_destroy(&cc);
    mtx_destroy(&cm);
    return rc.load();
  }

  struct sigaction old_;
  sigset_t old_mask_;
};

const char* flavour_name(Flavour f) {
  switch (f) {
    case Flavour::wait: return "pthread_cond_wait";
    case Flavour::timedwait: return "pthread_cond_timedwait";
    case Flavour::clockwait: return "pthread_cond_clockwait";
    case Flavour::cnd_wait: return "cnd_wait";
    default: return "cnd_timedwait";
  }
}

constexpr Flavour kFlavours[] = {Flavour::wait, Flavour::timedwait, Flavour::clockwait, Flavour::cnd_wait,
                                 Flavour::cnd_timedwait};

TEST_F(CondSignalTest, HandledSignalsDoNotEndAConditionWait) {
  for (Flavour f : kFlavours)
    for (bool held : {true, false})
      for (Aim aim : {Aim::process, Aim::thread}) {
        bool early = false;
        int rc = pelted_wait(f, held, aim, kGenerousMs, 100, true, &early);
        EXPECT_FALSE(early) << flavour_name(f) << (held ? ", mutex held" : ", mutex not held")
                            << (aim == Aim::process ? ", kill" : ", pthread_kill") << ": returned "
                            << lstest::err_name(rc) << " before any signal or broadcast";
        EXPECT_EQ(rc, 0) << flavour_name(f) << ": " << lstest::err_name(rc);
      }
}

// Interrupted timed waits keep their absolute deadline: pelted all along,
// they time out at the deadline (not before it, not with 0).
TEST_F(CondSignalTest, PeltedTimedWaitsTimeOutAtTheirDeadline) {
  for (Flavour f : {Flavour::timedwait, Flavour::clockwait, Flavour::cnd_timedwait})
    for (bool held : {true, false}) {
      bool early = false;
      int rc = pelted_wait(f, held, Aim::thread, 150, kGenerousMs, false, &early);
      EXPECT_EQ(rc, ETIMEDOUT) << flavour_name(f) << (held ? ", mutex held" : ", mutex not held") << ": "
                               << (rc == -2 ? "timed out before the deadline" : lstest::err_name(rc));
    }
}

}  // namespace

// sem_post is async-signal-safe. Handlers post while fresh threads register
// inside lockswap (their first lock calls) and while they exit: no handler
// may wait for a lock its own interrupted thread holds. The window is a few
// instructions wide, so this is a net, not a proof; tests/core has the
// deterministic versions (ThreadRegistrySignals, LockrefSemSignals).
namespace {
sem_t g_posted;
std::atomic<long> g_posts{0};
void post_in_handler(int) {
  if (sem_post(&g_posted) == 0) g_posts.fetch_add(1);
}
}  // namespace

TEST(SignalHandlerPosts, WhileThreadsRegisterAndExit) {
  ASSERT_EQ(sem_init(&g_posted, 0, 0), 0);
  struct sigaction sa {}, old {};
  sa.sa_handler = post_in_handler;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old), 0);
  std::atomic<bool> stop{false};
  std::atomic<long> taken{0};
  lstest::PThread consumer([&] {  // keeps a waiter on the semaphore, so posts wake
    while (!stop.load()) {
      timespec d = deadline_in(CLOCK_REALTIME, 20);
      if (sem_timedwait(&g_posted, &d) == 0) taken.fetch_add(1);
    }
  });
  g_posts = 0;
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(700);
  while (std::chrono::steady_clock::now() < end) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    lstest::PThread fresh([&] {
      pthread_mutex_lock(&m);  // the first lock call registers the thread
      pthread_mutex_unlock(&m);
    });
    for (int i = 0; i < 3; ++i) pthread_kill(fresh.handle(), SIGUSR2);  // some land after it ended
    fresh.join_or_die();
  }
  stop = true;
  consumer.join_or_die();
  while (sem_trywait(&g_posted) == 0) taken.fetch_add(1);
  sigaction(SIGUSR2, &old, nullptr);
  EXPECT_GT(g_posts.load(), 0);
  EXPECT_EQ(taken.load(), g_posts.load()) << "every handler's post arrives";
  EXPECT_EQ(sem_destroy(&g_posted), 0);
}
