// tests/core/kill_test_util.h — processes that die inside a critical window,
// and checks that must finish in bounded time (a hang fails, never blocks).
#pragma once
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>

namespace lockswap::coretest {

// Exit status of `body()` run in a fork child, or -1 when it has not exited
// within `limit` (a peer hanging on a dead holder). The child leads a process
// group of its own, and on a timeout the whole group is killed, so that no
// process it forked is left hanging with the test's output pipe open.
inline int exit_status_within(std::chrono::milliseconds limit, const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    _exit(body());
  }
  if (pid < 0) return -2;
  auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);  // in case it was killed before its setpgid
      waitpid(pid, &status, 0);
      return -1;
    }
    usleep(1000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Says "inside" on the report fd of fork_stopped_inside().
inline void report_inside(int report_fd) {
  char inside = 1;
  if (write(report_fd, &inside, 1) != 1) _exit(98);
}

// A fork child that runs `enter(report_fd)`; `enter` writes one byte to
// report_fd when it is inside the window and stays there. Returns the child's
// pid once the byte arrived (or -1 after `limit`), the child still in there.
inline pid_t fork_stopped_inside(const std::function<void(int report_fd)>& enter,
                                 std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    enter(fds[1]);
    _exit(99);  // `enter` should never return
  }
  close(fds[1]);
  pollfd p{fds[0], POLLIN, 0};
  char byte = 0;
  bool inside = pid > 0 && poll(&p, 1, static_cast<int>(limit.count())) == 1 && read(fds[0], &byte, 1) == 1;
  close(fds[0]);
  if (!inside && pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  return inside ? pid : -1;
}

// SIGKILL and reap: true when it died of the signal.
inline bool kill_and_reap(pid_t pid) {
  int status = 0;
  return kill(pid, SIGKILL) == 0 && waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) &&
         WTERMSIG(status) == SIGKILL;
}

}  // namespace lockswap::coretest
