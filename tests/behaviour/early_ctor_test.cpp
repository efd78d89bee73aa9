// tests/behaviour/early_ctor_test.cpp — locks taken by another library's
// constructor before liblockswap.so's constructor ran (early_lib.c) worked,
// and objects locked there can be released from main.
#include <errno.h>
#include <pthread.h>

#include <thread>

#include "tests/common/test_util.h"

extern "C" {
int early_report(char* out, size_t size);
int early_result_count(void);
extern pthread_mutex_t early_held_mutex;
extern pthread_rwlock_t early_held_rwlock;
extern pthread_mutex_t early_recursive;
extern pthread_cond_t early_cond;
}

namespace {

TEST(EarlyConstructor, LocksTakenBeforeLockswapsConstructorBehaved) {
  char buf[4096];
  int bad = early_report(buf, sizeof buf);
  EXPECT_GT(early_result_count(), 20);
  EXPECT_EQ(bad, 0) << buf;
}

TEST(EarlyConstructor, ObjectsLockedThereAreReleasedFromMain) {
  // Main is the thread that ran the constructors, so it owns them.
  EXPECT_EQ(lstest::on_other_thread([] { return pthread_mutex_trylock(&early_held_mutex); }), EBUSY);
  EXPECT_EQ(pthread_mutex_unlock(&early_held_mutex), 0);
  EXPECT_EQ(pthread_mutex_lock(&early_held_mutex), 0);
  EXPECT_EQ(pthread_mutex_unlock(&early_held_mutex), 0);

  EXPECT_EQ(lstest::on_other_thread([] { return pthread_rwlock_trywrlock(&early_held_rwlock); }), EBUSY);
  EXPECT_EQ(pthread_rwlock_unlock(&early_held_rwlock), 0);
  EXPECT_EQ(lstest::on_other_thread([] {
              int rc = pthread_rwlock_trywrlock(&early_held_rwlock);
              if (rc == 0) pthread_rwlock_unlock(&early_held_rwlock);
              return rc;
            }),
            0);
}

TEST(EarlyConstructor, ObjectsInitialisedThereKeepTheirKinds) {
  lstest_check_recursive_mutex(&early_recursive, lstest::expect_rc, nullptr);
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  ASSERT_EQ(pthread_mutex_lock(&m), 0);
  timespec d = lstest::deadline_in(CLOCK_REALTIME, 5);
  EXPECT_EQ(pthread_cond_timedwait(&early_cond, &m, &d), ETIMEDOUT);
  EXPECT_EQ(pthread_mutex_unlock(&m), 0);
  EXPECT_EQ(pthread_cond_destroy(&early_cond), 0);
}

}  // namespace
