// tests/common/test_util.h — test_support.h for the GoogleTest programs, plus
// a per-test watchdog so a deadlock fails the test instead of hanging ctest.
#pragma once
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "tests/common/test_support.h"

namespace lstest {

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
