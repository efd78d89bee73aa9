// tests/common/test_util.h — test_support.h for the GoogleTest programs, plus
// a per-test watchdog so a deadlock fails the test instead of hanging ctest.
#pragma once
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <initializer_list>

#include "tests/common/test_support.h"

namespace lstest {

// A lock_checks.h check as a gtest expectation.
inline void expect_rc(void*, const char* what, int got, int expected) {
  EXPECT_EQ(got, expected) << what << " returned " << err_name(got);
}

// One setting of an attribute object (a condattr's clock, an rwlockattr's
// kind, a mutexattr's type): `dflt` after init, `invalid` refused with
// EINVAL, and each of `valid` read back as it was set.
template <class Attr, class V>
void expect_attr_setting(int (*attr_init)(Attr*), int (*attr_destroy)(Attr*), int (*get)(const Attr*, V*),
                         int (*set)(Attr*, V), V dflt, V invalid, std::initializer_list<V> valid) {
  Attr a;
  ASSERT_EQ(attr_init(&a), 0);
  V got{};
  EXPECT_EQ(get(&a, &got), 0);
  EXPECT_EQ(got, dflt) << "the default";
  EXPECT_EQ(set(&a, invalid), EINVAL) << invalid;
  for (V v : valid) {
    EXPECT_EQ(set(&a, v), 0) << v;
    got = invalid;
    EXPECT_EQ(get(&a, &got), 0);
    EXPECT_EQ(got, v);
  }
  attr_destroy(&a);
}

inline void on_watchdog(int) {
  static const char head[] = "\n*** lockswap test watchdog: test did not finish in time: ";
  (void)!write(2, head, sizeof head - 1);
  (void)!write(2, g_current_test, strlen(g_current_test));
  (void)!write(2, "\n", 1);
  _exit(124);
}

class WatchdogListener : public testing::EmptyTestEventListener {
  void OnTestStart(const testing::TestInfo& info) override {
    snprintf(g_current_test, sizeof g_current_test, "%s.%s", info.test_suite_name(), info.name());
    signal(SIGALRM, on_watchdog);
    alarm(kWatchdogSeconds);
  }
  void OnTestEnd(const testing::TestInfo&) override { alarm(0); }
};

inline const bool g_watchdog_installed = [] {
  testing::UnitTest::GetInstance()->listeners().Append(new WatchdogListener);
  return true;
}();

}  // namespace lstest
