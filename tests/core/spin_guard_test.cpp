// tests/core/spin_guard_test.cpp — core/spin_guard.h's SharedSpinGuard: a
// lock word left by a dead process is taken over; one whose holder lives, or
// whose holder cannot be judged (another pid namespace, unknown namespace),
// is not.
#include "core/spin_guard.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>

#include "tests/core/kill_test_util.h"

namespace lockswap {
namespace {

using namespace std::chrono_literals;
using coretest::exit_status_within;

uint32_t own_ns_tag() {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint32_t>(st.st_ino) : 0;
}

uint64_t self_word() { return shared_guard_holder(getpid(), own_ns_tag()); }

// A pid that no process has any more (a child that exited and was reaped).
pid_t dead_pid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

// In a child: take the guard over a word holding `holder`. 0 = took it and
// reported a recovery; -1 = still waiting after `limit` (killed).
int take_over(uint64_t holder, std::chrono::milliseconds limit) {
  std::atomic<uint64_t> word{holder};
  return exit_status_within(limit, [&] {
    SharedSpinGuard g(word, self_word());
    return g.recovered() && word.load() == self_word() ? 0 : 1;
  });
}

TEST(SharedSpinGuard, FreeWordIsTakenAndGivenBack) {
  std::atomic<uint64_t> word{0};
  {
    SharedSpinGuard g(word, self_word());
    EXPECT_FALSE(g.contended());
    EXPECT_EQ(word.load(), self_word()) << "the holder's identity is in the word";
  }
  EXPECT_EQ(word.load(), 0u);
}

TEST(SharedSpinGuard, AHolderThatDiedIsTakenOver) {
  if (own_ns_tag() == 0) GTEST_SKIP() << "no /proc/self/ns/pid: dead holders are never judged";
  EXPECT_EQ(take_over(shared_guard_holder(dead_pid(), own_ns_tag()), 10s), 0);
}

// A holder killed but not yet reaped: its parent may be the waiter.
TEST(SharedSpinGuard, AZombieHolderIsTakenOver) {
  if (own_ns_tag() == 0) GTEST_SKIP() << "no /proc/self/ns/pid: dead holders are never judged";
  pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  ASSERT_GT(zombie, 0);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(zombie), &info, WEXITED | WNOWAIT), 0);  // exited, not reaped
  EXPECT_TRUE(process_is_zombie(zombie));
  EXPECT_EQ(take_over(shared_guard_holder(zombie, own_ns_tag()), 10s), 0);
  waitpid(zombie, nullptr, 0);
}

TEST(SharedSpinGuard, ALiveHolderIsWaitedFor) {
  EXPECT_FALSE(process_is_zombie(getpid()));
  EXPECT_EQ(take_over(shared_guard_holder(getpid(), own_ns_tag()), 300ms), -1) << "this process is alive";
}

TEST(SharedSpinGuard, AHolderInAnotherOrUnknownPidNamespaceIsNeverJudged) {
  pid_t gone = dead_pid();
  EXPECT_EQ(take_over(shared_guard_holder(gone, own_ns_tag() + 1), 300ms), -1) << "another namespace";
  EXPECT_EQ(take_over(shared_guard_holder(gone, 0), 300ms), -1) << "unknown namespace";
}

TEST(SharedSpinGuard, HolderCheckLeavesErrnoAlone) {
  errno = EINTR;
  EXPECT_TRUE(SharedSpinGuard::holder_is_dead(shared_guard_holder(dead_pid(), 7), shared_guard_holder(1, 7)));
  EXPECT_EQ(errno, EINTR);
}

}  // namespace
}  // namespace lockswap
