// tests/behaviour/c11_test.cpp — C11 <threads.h> mtx_* / cnd_*: glibc's C11
// functions call internal aliases, so lockswap interposes them itself; the
// results must map exactly as glibc's (thrd_success/busy/timedout/error).
#include <errno.h>
#include <threads.h>

#include <atomic>
#include <thread>

#include "tests/common/test_util.h"

namespace {

using namespace lstest;  // clocks, deadlines, on_other_thread

int other_trylock(mtx_t* m) {
  return on_other_thread([m] {
    int rc = mtx_trylock(m);
    if (rc == thrd_success) mtx_unlock(m);
    return rc;
  });
}

TEST(C11Mutex, EveryStandardTypeInitialises) {
  for (int type : {int{mtx_plain}, int{mtx_timed}, mtx_plain | mtx_recursive, mtx_timed | mtx_recursive}) {
    mtx_t m;
    ASSERT_EQ(mtx_init(&m, type), thrd_success) << "type " << type;
    EXPECT_EQ(mtx_lock(&m), thrd_success);
    EXPECT_EQ(mtx_unlock(&m), thrd_success);
    mtx_destroy(&m);
  }
}

// glibc 2.36's mtx_init does not reject unknown types: anything that is not
// one of the recursive combinations becomes a plain mutex, and it returns
// thrd_success.
TEST(C11Mutex, UnknownTypeIsAcceptedAsPlainLikeGlibc) {
  mtx_t m;
  EXPECT_EQ(mtx_init(&m, 99), thrd_success);
  EXPECT_EQ(mtx_lock(&m), thrd_success);
  EXPECT_EQ(mtx_trylock(&m), thrd_busy) << "must be a plain (non-recursive) mutex";
  EXPECT_EQ(mtx_unlock(&m), thrd_success);
  mtx_destroy(&m);
}

TEST(C11Mutex, PlainTrylockIsBusyForOwnerAndOthers) {
  mtx_t m;
  ASSERT_EQ(mtx_init(&m, mtx_plain), thrd_success);
  ASSERT_EQ(mtx_lock(&m), thrd_success);
  EXPECT_EQ(mtx_trylock(&m), thrd_busy);
  EXPECT_EQ(other_trylock(&m), thrd_busy);
  EXPECT_EQ(mtx_unlock(&m), thrd_success);
  EXPECT_EQ(other_trylock(&m), thrd_success);
  EXPECT_EQ(mtx_trylock(&m), thrd_success);
  EXPECT_EQ(mtx_unlock(&m), thrd_success);
  mtx_destroy(&m);
}

TEST(C11Mutex, RecursiveCountsAndRejectsForeignUnlock) {
  mtx_t m;
  ASSERT_EQ(mtx_init(&m, mtx_timed | mtx_recursive), thrd_success);
  timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
  ASSERT_EQ(mtx_lock(&m), thrd_success);
  ASSERT_EQ(mtx_trylock(&m), thrd_success);
  ASSERT_EQ(mtx_timedlock(&m, &d), thrd_success);
  EXPECT_EQ(on_other_thread([&m] { return mtx_unlock(&m); }), thrd_error) << "EPERM maps to thrd_error";
  EXPECT_EQ(mtx_unlock(&m), thrd_success);
  EXPECT_EQ(mtx_unlock(&m), thrd_success);
  EXPECT_EQ(other_trylock(&m), thrd_busy);
  EXPECT_EQ(mtx_unlock(&m), thrd_success);
  EXPECT_EQ(other_trylock(&m), thrd_success);
  EXPECT_EQ(mtx_unlock(&m), thrd_error);
  mtx_destroy(&m);
}

TEST(C11Mutex, TimedlockTimesOutAgainstAnotherOwner) {
  mtx_t m;
  ASSERT_EQ(mtx_init(&m, mtx_timed), thrd_success);
  lstest::Holder h([&m] { return mtx_lock(&m); }, [&m] { return mtx_unlock(&m); });
  ASSERT_EQ(h.acquire_rc(), thrd_success);
  timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
  EXPECT_EQ(mtx_timedlock(&m, &d), thrd_timedout);
  EXPECT_TRUE(reached(CLOCK_REALTIME, d));
  timespec bad{time(nullptr) + 1, 1'000'000'000L};
  EXPECT_EQ(mtx_timedlock(&m, &bad), thrd_error) << "EINVAL maps to thrd_error";
  EXPECT_EQ(h.release(), thrd_success);
  EXPECT_EQ(mtx_timedlock(&m, &bad), thrd_success) << "uncontended: the timeout is not looked at";
  EXPECT_EQ(mtx_unlock(&m), thrd_success);
  mtx_destroy(&m);
}

TEST(C11Mutex, PlainTimedlockByOwnerTimesOut) {
  mtx_t m;
  ASSERT_EQ(mtx_init(&m, mtx_timed), thrd_success);
  ASSERT_EQ(mtx_lock(&m), thrd_success);
  timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
  EXPECT_EQ(mtx_timedlock(&m, &d), thrd_timedout);
  EXPECT_TRUE(reached(CLOCK_REALTIME, d));
  EXPECT_EQ(mtx_unlock(&m), thrd_success);
  mtx_destroy(&m);
}

struct Shared {
  mtx_t m;
  cnd_t c;
  int waiting = 0;
  bool flag = false;
  int rc = -1;
};

int c11_waiter(void* p) {
  auto* s = static_cast<Shared*>(p);
  mtx_lock(&s->m);
  ++s->waiting;
  while (!s->flag) s->rc = cnd_wait(&s->c, &s->m);
  mtx_unlock(&s->m);
  return 7;
}

TEST(C11Cond, SignalAndBroadcastWakeWaitersStartedWithThrdCreate) {
  Shared s;
  ASSERT_EQ(mtx_init(&s.m, mtx_plain), thrd_success);
  ASSERT_EQ(cnd_init(&s.c), thrd_success);
  EXPECT_EQ(cnd_signal(&s.c), thrd_success);
  EXPECT_EQ(cnd_broadcast(&s.c), thrd_success);
  constexpr int kWaiters = 3;
  thrd_t t[kWaiters];
  for (auto& th : t) ASSERT_EQ(thrd_create(&th, c11_waiter, &s), thrd_success);
  for (;;) {
    ASSERT_EQ(mtx_lock(&s.m), thrd_success);
    if (s.waiting == kWaiters) break;
    mtx_unlock(&s.m);
    usleep(1000);
  }
  s.flag = true;
  EXPECT_EQ(cnd_broadcast(&s.c), thrd_success);
  EXPECT_EQ(mtx_unlock(&s.m), thrd_success);
  for (auto& th : t) {
    int res = 0;
    // A lost wakeup is caught by the per-test watchdog.
    EXPECT_EQ(thrd_join(th, &res), thrd_success);
    EXPECT_EQ(res, 7);
  }
  EXPECT_EQ(s.rc, thrd_success);
  cnd_destroy(&s.c);
  mtx_destroy(&s.m);
}

TEST(C11Cond, TimedwaitTimesOutWithTheMutexHeld) {
  Shared s;
  ASSERT_EQ(mtx_init(&s.m, mtx_timed), thrd_success);
  ASSERT_EQ(cnd_init(&s.c), thrd_success);
  ASSERT_EQ(mtx_lock(&s.m), thrd_success);
  timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
  EXPECT_EQ(cnd_timedwait(&s.c, &s.m, &d), thrd_timedout);
  EXPECT_TRUE(reached(CLOCK_REALTIME, d));
  EXPECT_EQ(other_trylock(&s.m), thrd_busy) << "mutex not re-acquired";
  timespec bad{time(nullptr) + 1, -1};
  EXPECT_EQ(cnd_timedwait(&s.c, &s.m, &bad), thrd_error);
  EXPECT_EQ(other_trylock(&s.m), thrd_busy);
  EXPECT_EQ(mtx_unlock(&s.m), thrd_success);
  cnd_destroy(&s.c);
  mtx_destroy(&s.m);
}

TEST(C11Cond, TimedwaitWokenBySignalReturnsSuccess) {
  Shared s;
  ASSERT_EQ(mtx_init(&s.m, mtx_plain), thrd_success);
  ASSERT_EQ(cnd_init(&s.c), thrd_success);
  std::thread t([&] {
    mtx_lock(&s.m);
    ++s.waiting;
    while (!s.flag) {
      timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
      s.rc = cnd_timedwait(&s.c, &s.m, &d);
      if (s.rc != thrd_success) break;
    }
    mtx_unlock(&s.m);
  });
  for (;;) {
    ASSERT_EQ(mtx_lock(&s.m), thrd_success);
    if (s.waiting == 1) break;
    mtx_unlock(&s.m);
    usleep(1000);
  }
  s.flag = true;
  EXPECT_EQ(cnd_signal(&s.c), thrd_success);
  EXPECT_EQ(mtx_unlock(&s.m), thrd_success);
  t.join();
  EXPECT_EQ(s.rc, thrd_success);
  cnd_destroy(&s.c);
  mtx_destroy(&s.m);
}

}  // namespace
