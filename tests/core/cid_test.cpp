// tests/core/cid_test.cpp — core/cid.h: every allocator hands out small ids;
// the exclusive ones (global, thread) never give one id to two holders; ids
// come back at sleep, exit, reclaim; a fork child starts clean.
#include "core/cid.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdio>
#include <functional>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "arch/clock.h"
#include "core/cancel.h"
#include "core/wait_ctx.h"
#include "tests/core/core_test_util.h"
#include "tests/core/kill_test_util.h"

// The test-only pause point (core/cid.h): a fork child that set the report
// fd says it is inside the cid_lock, then stays there until it is killed
// (or, with g_cid_pause_stops, stops itself there and goes on at SIGCONT).
// g_cid_pause_raises raises a signal there once instead: its handler runs
// while its thread holds the cid_lock.
namespace {
int g_cid_pause_report_fd = -1;
bool g_cid_pause_stops = false;
std::atomic<int> g_cid_pause_raises{0};
int g_fake_at_secure = 0;
}  // namespace
extern "C" void lockswap_test_pause_in_cid_lock() {
  if (int sig = g_cid_pause_raises.exchange(0)) {
    raise(sig);
    return;
  }
  if (g_cid_pause_report_fd < 0) return;
  lockswap::coretest::report_inside(g_cid_pause_report_fd);
  if (g_cid_pause_stops) {
    g_cid_pause_report_fd = -1;  // its next allocation goes through
    raise(SIGSTOP);
    return;
  }
  for (;;) pause();
}
// The test-only stand-in for getauxval(AT_SECURE) (core/cid.h).
extern "C" int lockswap_test_at_secure() { return g_fake_at_secure; }

namespace lockswap {
namespace {

using namespace coretest;

bool two_cpus_usable() {
  if (get_nprocs() < 2) return false;
  bool ok = false;
  std::thread([&] { ok = pin_to_cpu(0) && pin_to_cpu(1); }).join();
  return ok;
}

// Runs `body(i)` on n threads that all hold their id at the same moment.
std::vector<uint32_t> ids_held_at_once(int n) {
  std::vector<uint32_t> ids(static_cast<size_t>(n));
  std::barrier all_hold(n);
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&, i] {
      ids[static_cast<size_t>(i)] = cid::current();
      all_hold.arrive_and_wait();
      EXPECT_EQ(cid::current(), ids[static_cast<size_t>(i)]) << "an exclusive id changed without a sleep";
    });
  for (auto& t : ts) t.join();
  return ids;
}

// In a fork child: run `body`, exit 0 if it returned true.
int in_child(const std::function<bool()>& body) {
  pid_t pid = fork();
  if (pid == 0) {
    after_fork_in_child();  // what preload's atfork handler does
    cid::after_fork_in_child();
    _exit(body() ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// Each test picks its allocator and leaves the default (thread: no hooks).
class CidTest : public ::testing::Test {
 protected:
  void TearDown() override { cid::select(CidMode::thread); }
};

class EveryCid : public CidTest, public ::testing::WithParamInterface<CidMode> {};

TEST(CidCpus, PossibleCpusMatchesGlibc) { EXPECT_EQ(cid::possible_cpus(), static_cast<uint32_t>(get_nprocs_conf())); }

TEST_P(EveryCid, IdsStayBelowTheBoundOnEveryThread) {
  cid::select(GetParam());
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&] {
      for (int k = 0; k < 2000; ++k) {
        if (cid::current() >= cid::kMaxCids) ++bad;
        if (k % 256 == 0) sleep_in_lockswap();
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, EveryCid, every_cid(), cid_param_name);

// --------------------------------------------------------------- global

TEST_F(CidTest, GlobalIdsHeldAtOnceAreDistinctAndDense) {
  ASSERT_EQ(cid::select(CidMode::global), CidMode::global);
  std::vector<uint32_t> ids = ids_held_at_once(8);
  EXPECT_EQ(std::set<uint32_t>(ids.begin(), ids.end()).size(), ids.size());
  EXPECT_LT(*std::max_element(ids.begin(), ids.end()), 8u) << "the lowest free ids, nothing else holds any";
  EXPECT_EQ(cid::ids_in_use(), 0u) << "threads that exited gave their ids back";
}

TEST_F(CidTest, GlobalSleepGivesTheIdBackAndTheNextUseTakesOne) {
  cid::select(CidMode::global);
  Events ev;
  uint32_t first = cid::current();
  EXPECT_EQ(cid::ids_in_use(), 1u);
  EXPECT_EQ(cid::current(), first) << "kept while the thread does not sleep";
  sleep_in_lockswap();
  EXPECT_EQ(cid::ids_in_use(), 0u);
  EXPECT_EQ(cid::current(), first) << "the lowest free id again";
  if (kEvents) {
    EXPECT_EQ(ev(LockEvent::cid_alloc), 2u);
    EXPECT_EQ(ev(LockEvent::cid_free), 1u);
  }
}

// The allocators' slow paths keep cleanups, and id lookups run in unlock
// calls, which preload does not run deferred; an asynchronous cancellation
// landing in one of those frames would terminate the process. So a thread of
// the asynchronous type borrows an id instead of taking (global) or refilling
// (percpu) one; the next lookup of the deferred type takes one as usual.
TEST_F(CidTest, AThreadOfTheAsynchronousTypeBorrowsInsteadOfEnteringTheSlowPaths) {
  for (CidMode mode : {CidMode::global, CidMode::percpu}) {
    ASSERT_EQ(cid::select(mode), mode);
    std::thread([mode] {
      Events ev;
      cancel::t_async_type = true;  // what preload's pthread_setcanceltype records
      uint32_t borrowed = cid::current();
      cancel::t_async_type = false;
      EXPECT_LT(borrowed, cid::kMaxCids);
      EXPECT_EQ(cid::ids_in_use(), 0u) << static_cast<int>(mode);
      if (kEvents) {
        EXPECT_EQ(ev(LockEvent::cid_fallback), 1u) << static_cast<int>(mode);
        EXPECT_EQ(ev(LockEvent::cid_alloc), 0u) << static_cast<int>(mode);
      }
      if (mode == CidMode::global) sleep_in_lockswap();  // a borrowed id is kept until the next sleep
      (void)cid::current();
      EXPECT_EQ(cid::ids_in_use(), 1u) << static_cast<int>(mode);
    }).join();
  }
}

TEST_F(CidTest, GlobalNoTwoThreadsEverHoldTheSameId) {
  cid::select(CidMode::global);
  std::atomic<int> holder[cid::kMaxCids] = {};
  std::atomic<int> clashes{0};
  std::vector<std::thread> ts;
  for (int t = 1; t <= 6; ++t)
    ts.emplace_back([&, t] {
      for (int k = 0; k < 3000; ++k) {
        uint32_t id = cid::current();
        if (holder[id].exchange(t) != 0) ++clashes;
        std::this_thread::yield();
        holder[id].store(0);
        sleep_in_lockswap();  // gives it back: the next round takes one again
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(clashes.load(), 0);
  EXPECT_EQ(cid::ids_in_use(), 0u);
}

TEST_F(CidTest, GlobalForkChildSharesTheIdSpaceButNotTheParentsId) {
  cid::select(CidMode::global);
  uint32_t parent_id = cid::current();
  int rc = in_child([&] {
    uint32_t mine = cid::current();  // the parent's id is still taken, in the shared bitmap
    bool ok = mine != parent_id && cid::ids_in_use() == 2;
    cid::put_global();
    return ok && cid::ids_in_use() == 1;
  });
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(cid::current(), parent_id) << "the child did not free the parent's id";
  EXPECT_EQ(cid::ids_in_use(), 1u);
}

TEST_F(CidTest, GlobalIdsOfADeadProcessAreReclaimed) {
  cid::select(CidMode::global);
  EXPECT_EQ(in_child([] { return cid::current() < cid::kMaxCids; }), 0);  // exits still holding it
  EXPECT_EQ(cid::ids_in_use(), 1u);
  EXPECT_EQ(cid::reclaim_dead_processes(), 1u);
  EXPECT_EQ(cid::ids_in_use(), 0u);
}

// A relative SIGKILLed inside the cid_lock, with an id half taken (owner
// written, bit not yet set), must not leave the others spinning, even before
// its parent reaps it: the next allocation takes the lock over, and the
// half-taken id is still free.
TEST_F(CidTest, GlobalProcessKilledInsideTheCidLockDoesNotStopTheOthers) {
  ASSERT_EQ(cid::select(CidMode::global), CidMode::global);
  pid_t holder = fork_stopped_inside([](int report_fd) {
    after_fork_in_child();
    cid::after_fork_in_child();
    g_cid_pause_report_fd = report_fd;
    cid::current();
  });
  ASSERT_GT(holder, 0) << "the child never reached the pause point";
  ASSERT_EQ(kill(holder, SIGKILL), 0);
  siginfo_t info{};  // dead but not reaped yet: a zombie holds the lock
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(holder), &info, WEXITED | WNOWAIT), 0);
  int rc = exit_status_within(10s, [] {
    after_fork_in_child();
    cid::after_fork_in_child();
    Events ev;
    if (cid::current() != 0) return 1;  // the half-taken id was never marked taken
    if (cid::ids_in_use() != 1) return 2;
    cid::put_global();
    if (cid::ids_in_use() != 0) return 3;
    if (kEvents && ev(LockEvent::cid_lock_recovered) != 1) return 4;
    return 0;
  });
  waitpid(holder, nullptr, 0);
  ASSERT_NE(rc, -1) << "a relative hung on the dead holder's cid_lock";
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(cid::current(), 0u) << "this process takes the lock too";
  EXPECT_EQ(cid::ids_in_use(), 1u);
  cid::put_global();
  EXPECT_EQ(cid::ids_in_use(), 0u);
}

TEST_F(CidTest, GlobalThreadExitGivesTheIdBack) {
  cid::select(CidMode::global);
  std::thread([] { EXPECT_EQ(cid::current(), 0u); }).join();
  EXPECT_EQ(cid::ids_in_use(), 0u);
}

// ----------------------------------------- global: stalls, signals, identity

// CPU seconds process `pid` has used (/proc/<pid>/stat utime + stime).
double cpu_seconds_of(pid_t pid) {
  char path[64], stat[1024] = {};
  snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = fopen(path, "r");
  if (f == nullptr) return -1;
  size_t n = fread(stat, 1, sizeof stat - 1, f);
  fclose(f);
  stat[n] = '\0';
  const char* p = strrchr(stat, ')');
  unsigned long utime = 0, stime = 0;
  if (p == nullptr || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
    return -1;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Like exit_status_within, but a child still running at `limit` is first
// measured: `cpu_share` is the share of one CPU it burned meanwhile.
int exit_status_or_cpu_share(std::chrono::milliseconds limit, const std::function<int()>& body, double& cpu_share) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  auto start = std::chrono::steady_clock::now();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    auto spent = std::chrono::steady_clock::now() - start;
    if (spent > limit) {
      cpu_share = cpu_seconds_of(pid) / std::chrono::duration<double>(spent).count();
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    usleep(1000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

uint64_t process_cpu_ns() { return arch::clock_ns(CLOCK_PROCESS_CPUTIME_ID); }

std::string read_all(int fd) {
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = pread(fd, buf, sizeof buf, static_cast<off_t>(text.size()))) > 0) text.append(buf, static_cast<size_t>(n));
  return text;
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A relative stopped inside the cid_lock (SIGSTOP, a debugger, a cgroup
// freezer) is alive, so it is never taken over. Its relatives' waits on the
// lock (here: 100 switch pairs, what 100 poll(0, 0, 0) calls do with the
// switch model) must end without burning a CPU, say why once on lockswap's
// stderr, and once the holder goes on (SIGCONT) or dies (SIGKILL) everyone
// takes ids as before.
void write_to_stderr(const char* text, std::size_t n) {
  if (write(2, text, n) < 0) return;
}

void stopped_holder_then(int end_signal) {
  ASSERT_EQ(cid::select(CidMode::global), CidMode::global);
  pid_t holder = fork_stopped_inside([](int report_fd) {
    after_fork_in_child();
    cid::after_fork_in_child();
    g_cid_pause_report_fd = report_fd;
    g_cid_pause_stops = true;
    uint32_t id = cid::current();  // stops inside the cid_lock; goes on at SIGCONT
    cid::put_global();
    _exit(id == 0 ? 0 : 1);
  });
  ASSERT_GT(holder, 0) << "the child never reached the pause point";
  int status = 0;
  ASSERT_EQ(waitpid(holder, &status, WUNTRACED), holder);
  ASSERT_TRUE(WIFSTOPPED(status));
  int log = memfd_create("cid-stall-log", 0);
  ASSERT_GE(log, 0);
  double burned = 0;
  int rc = exit_status_or_cpu_share(
      10s,
      [log] {
        after_fork_in_child();
        cid::after_fork_in_child();
        if (dup2(log, 2) != 2) return 10;
        cid::g_say_hook.store(write_to_stderr);  // preload installs its private stderr's writer
        uint64_t wall0 = arch::monotonic_ns(), cpu0 = process_cpu_ns();
        cid::set_switch_model(true);  // takes an id: meets the stopped holder
        for (int i = 0; i < 100; ++i) {
          cid::switch_out();
          cid::switch_in();
        }
        uint64_t wall = arch::monotonic_ns() - wall0, cpu = process_cpu_ns() - cpu0;
        dprintf(2, "waiter: %llu us of CPU in %llu us\n", static_cast<unsigned long long>(cpu / 1000),
                static_cast<unsigned long long>(wall / 1000));
        if (cid::current() >= cid::kMaxCids) return 2;
        return cpu * 10 < wall ? 0 : 1;
      },
      burned);
  std::string said = read_all(log);
  close(log);
  ::testing::Test::RecordProperty("said", said);
  EXPECT_NE(rc, -1) << "the waiter hung on the stopped holder for 10 s, burning " << static_cast<int>(burned * 100)
                    << "% of a CPU";
  EXPECT_NE(rc, 1) << "the waiter finished but burned >= 10% of a CPU";
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(count_of(said, "cid_lock"), 1) << "said: [" << said << "]";
  EXPECT_NE(said.find(std::to_string(holder)), std::string::npos) << "said: [" << said << "]";
  ASSERT_EQ(kill(holder, end_signal), 0);
  if (end_signal == SIGKILL) {
    EXPECT_TRUE(kill_and_reap(holder));
  } else {
    ASSERT_EQ(waitpid(holder, &status, 0), holder);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_EQ(cid::current(), 0u) << "this process takes the lock again";
  EXPECT_EQ(cid::ids_in_use(), 1u);
  cid::put_global();
}

TEST_F(CidTest, GlobalStoppedHolderCostsNoCpuIsSaidOnceAndGoesOnAtSigcont) { stopped_holder_then(SIGCONT); }
TEST_F(CidTest, GlobalStoppedHolderCostsNoCpuIsSaidOnceAndIsTakenOverOnceKilled) { stopped_holder_then(SIGKILL); }

// A signal handler that takes an id (an interposed wait with the switch
// model, a percid read lock) while its thread is inside the cid_lock must
// not wait for its own thread: it gets an id without the lock.
std::atomic<uint32_t> g_handler_id{~0u};
TEST_F(CidTest, GlobalSignalHandlerInsideTheCidLockDoesNotWaitForItsOwnThread) {
  ASSERT_EQ(cid::select(CidMode::global), CidMode::global);
  int rc = exit_status_within(10s, [] {
    after_fork_in_child();
    cid::after_fork_in_child();
    struct sigaction sa {};
    sa.sa_handler = [](int) {
      g_handler_id = cid::current();
      cid::put_global();
    };
    if (sigaction(SIGUSR1, &sa, nullptr) != 0) return 10;
    g_cid_pause_raises = SIGUSR1;
    uint32_t id = cid::current();  // the handler runs inside the cid_lock
    if (g_cid_pause_raises.load() != 0) return 1;
    if (g_handler_id.load() >= cid::kMaxCids) return 2;
    if (id != 0 || cid::ids_in_use() != 1) return 3;
    cid::put_global();
    return cid::ids_in_use() == 0 ? 0 : 4;
  });
  EXPECT_NE(rc, -1) << "the handler deadlocked on its own thread's cid_lock";
  EXPECT_EQ(rc, 0);
}

// A child made by a raw clone() runs no atfork handler: it must still find
// out it is a new process before it frees ids or holds the cid_lock.
pid_t raw_fork() { return static_cast<pid_t>(syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr)); }

TEST_F(CidTest, GlobalRawCloneChildLeavesTheParentsIdsAlone) {
  if (kUnderTsan) GTEST_SKIP() << "TSan's runtime does not survive a raw clone";
  ASSERT_EQ(cid::select(CidMode::global), CidMode::global);
  uint32_t mine = cid::current();
  pid_t pid = raw_fork();
  if (pid == 0) {  // its thread still names its parent twin's id
    cid::put_global();
    cid::release_process_ids();  // what its exit handler does
    _exit(0);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(cid::ids_in_use(), 1u) << "the raw clone child freed its parent's id";
  EXPECT_EQ(cid::current(), mine);
}

TEST_F(CidTest, GlobalRawCloneChildKilledInsideTheCidLockIsTakenOver) {
  if (kUnderTsan) GTEST_SKIP() << "TSan's runtime does not survive a raw clone";
  ASSERT_EQ(cid::select(CidMode::global), CidMode::global);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t holder = raw_fork();
  if (holder == 0) {
    close(fds[0]);
    g_cid_pause_report_fd = fds[1];
    cid::current();
    _exit(99);
  }
  ASSERT_GT(holder, 0);
  close(fds[1]);
  pollfd p{fds[0], POLLIN, 0};
  char byte = 0;
  bool inside = poll(&p, 1, 10000) == 1 && read(fds[0], &byte, 1) == 1;
  close(fds[0]);
  ASSERT_TRUE(kill_and_reap(holder));
  ASSERT_TRUE(inside) << "the child never reached the pause point";
  int rc = exit_status_within(10s, [] {
    after_fork_in_child();
    cid::after_fork_in_child();
    Events ev;
    if (cid::current() != 0) return 1;
    if (kEvents && ev(LockEvent::cid_lock_recovered) != 1) return 2;
    cid::put_global();
    return cid::ids_in_use() == 0 ? 0 : 3;
  });
  EXPECT_NE(rc, -1) << "a relative hung on the cid_lock of a dead raw clone child, held under its parent's pid";
  EXPECT_EQ(rc, 0) << "the lock was not taken over from the dead child";
}

// A process that changes credentials (a server's child dropping root)
// leaves the shared page: what it holds there is given back, and it takes
// ids from a page of its own after that.
TEST_F(CidTest, GlobalAProcessThatChangesCredentialsLeavesTheSharedPage) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to change credentials";
  ASSERT_EQ(cid::select(CidMode::global), CidMode::global);
  int rc = in_child([] {
    if (cid::current() != 0 || cid::ids_in_use() != 1) return false;
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) return false;
    for (int i = 0; i < 64; ++i) {  // the allocator compares credentials every 64 slow paths
      cid::put_global();
      (void)cid::current();
    }
    return cid::current() == 0 && cid::ids_in_use() == 1;
  });
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(cid::ids_in_use(), 0u) << "the child took or kept ids in the shared page after dropping root";
}

// Loaded into a process that exec'd a set-id program (AT_SECURE): the page
// is the process's own, its children's copies are theirs.
TEST_F(CidTest, GlobalUnderAtSecureNoPageIsSharedWithChildren) {
  g_fake_at_secure = 1;
  CidMode m = cid::select(CidMode::global);
  g_fake_at_secure = 0;
  ASSERT_EQ(m, CidMode::global);
  EXPECT_EQ(cid::current(), 0u);
  EXPECT_EQ(in_child([] { return cid::current() == 0 && cid::ids_in_use() == 1; }), 0);
  EXPECT_EQ(cid::ids_in_use(), 1u) << "the child's id is in this process's page";
  cid::put_global();
  ASSERT_EQ(cid::select(CidMode::global), CidMode::global);
  EXPECT_EQ(in_child([] { return cid::current() == 0; }), 0);
  EXPECT_EQ(cid::ids_in_use(), 1u) << "without AT_SECURE the page is shared again";
  EXPECT_EQ(cid::reclaim_dead_processes(), 1u);
}

// --------------------------------------------------------------- percpu

TEST_F(CidTest, PercpuThreadsOnOneCpuShareItsIdAndCpusDiffer) {
  if (!two_cpus_usable()) GTEST_SKIP() << "needs two CPUs";
  cid::select(CidMode::percpu);
  auto id_on = [](int cpu) {
    uint32_t id = ~0u;
    std::thread([&] {
      if (pin_to_cpu(cpu)) id = cid::current();
    }).join();
    return id;
  };
  uint32_t a = id_on(0), b = id_on(1);
  EXPECT_NE(a, b);
  EXPECT_EQ(id_on(0), a) << "the CPU kept its id after its thread exited (lazy put)";
  EXPECT_EQ(cid::ids_in_use(), 2u);
}

TEST_F(CidTest, PercpuIdsStayWithinTheCpusUsed) {
  cid::select(CidMode::percpu);
  std::vector<std::thread> ts;
  for (int i = 0; i < 16; ++i)
    ts.emplace_back([] {
      for (int k = 0; k < 500; ++k) {
        (void)cid::current();
        if (k % 50 == 0) std::this_thread::yield();
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_LE(cid::ids_in_use(), static_cast<uint32_t>(get_nprocs_conf()));
}

TEST_F(CidTest, PercpuScanReclaimsIdleCpusAndCompactsTowardZero) {
  if (!two_cpus_usable()) GTEST_SKIP() << "needs two CPUs";
  cid::select(CidMode::percpu);
  Events ev;
  uint32_t idle_cpu_id = ~0u;
  std::atomic<uint32_t> busy_id{~0u};
  std::thread([&] { idle_cpu_id = pin_to_cpu(1) ? cid::current() : ~0u; }).join();  // takes 0
  std::atomic<int> scans{0}, uses{0};
  std::thread busy([&] {
    if (pin_to_cpu(0)) busy_id = cid::current();  // takes 1
    for (int s = 1; s <= 3; ++s) {
      while (scans.load() < s) std::this_thread::yield();
      (void)cid::current();  // in use in every epoch
      uses.store(s);
    }
  });
  while (busy_id == ~0u) std::this_thread::yield();
  EXPECT_EQ(idle_cpu_id, 0u);
  EXPECT_EQ(busy_id.load(), 1u);
  for (int s = 1; s <= 3; ++s) {  // epochs 1..3: CPU 1 is idle from epoch 1 on
    cid::percpu_scan();
    scans.store(s);
    while (uses.load() < s) std::this_thread::yield();
  }
  busy.join();
  EXPECT_EQ(cid::g_cpu_cache[1].cid.load(), cid::kUnset) << "the idle CPU's id was reclaimed";
  // The busy CPU held id 1 >= weight 1: the scan asked for it back (lazy put),
  // and its next user took the lowest id instead.
  uint32_t compacted = ~0u;
  std::thread([&] { compacted = pin_to_cpu(0) ? cid::current() : ~0u; }).join();
  EXPECT_EQ(compacted, 0u);
  EXPECT_EQ(cid::ids_in_use(), 1u);
  if (kEvents) { EXPECT_GE(ev(LockEvent::cid_reclaim), 2u); }
}

TEST_F(CidTest, PercpuForkChildStartsWithAnEmptyCache) {
  cid::select(CidMode::percpu);
  (void)cid::current();
  ASSERT_GE(cid::ids_in_use(), 1u);
  EXPECT_EQ(in_child([] {
              bool clean = cid::ids_in_use() == 0;
              return clean && cid::current() == 0 && cid::ids_in_use() == 1;
            }),
            0);
}

// ----------------------------------------------------------------- rseq

TEST_F(CidTest, RseqUsesTheKernelsIdOrFallsBackToPercpuVisibly) {
  Events ev;
  CidMode m = cid::select(CidMode::rseq);
  if (!arch::kernel_mm_cid_available()) {
    EXPECT_EQ(m, CidMode::percpu);
    EXPECT_TRUE(cid::rseq_fell_back());
    if (kEvents) { EXPECT_EQ(ev(LockEvent::cid_fallback), 1u); }
    return;
  }
  EXPECT_EQ(m, CidMode::rseq);
  EXPECT_FALSE(cid::rseq_fell_back());
  EXPECT_EQ(static_cast<int>(cid::current()), arch::kernel_mm_cid());
  EXPECT_LT(cid::current(), static_cast<uint32_t>(get_nprocs_conf()));
}

TEST_F(CidTest, RseqThreadsRunningAtOnceOnTwoCpusGetDistinctIds) {
  if (!two_cpus_usable()) GTEST_SKIP() << "needs two CPUs";
  if (cid::select(CidMode::rseq) != CidMode::rseq) GTEST_SKIP() << "no kernel mm_cid";
  uint32_t ids[2] = {~0u, ~0u};
  std::atomic<int> arrived{0}, done{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 2; ++i)
    ts.emplace_back([&, i] {
      ASSERT_TRUE(pin_to_cpu(i));
      arrived.fetch_add(1);
      while (arrived.load() < 2) {  // both running now
      }
      ids[i] = cid::current();
      done.fetch_add(1);
      while (done.load() < 2) {
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_NE(ids[0], ids[1]);
}

// --------------------------------------------------------------- thread

TEST_F(CidTest, ThreadIdIsTheRegistryIdKeptAcrossSleepsAndRecycledAtExit) {
  cid::select(CidMode::thread);
  uint32_t a = ~0u, b = ~0u;
  std::thread([&] {
    a = cid::current();
    EXPECT_EQ(a, self_slot().id - 1);
    sleep_in_lockswap();
    EXPECT_EQ(cid::current(), a);
  }).join();
  std::thread([&] { b = cid::current(); }).join();
  EXPECT_EQ(b, a) << "the exited thread's id is the first one reused";
  std::vector<uint32_t> ids = ids_held_at_once(8);
  EXPECT_EQ(std::set<uint32_t>(ids.begin(), ids.end()).size(), ids.size());
}

}  // namespace
}  // namespace lockswap
