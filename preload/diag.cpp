// preload/diag.cpp — lockswap's private stderr (preload/diag.h).
//
// No allocation, no stdio, no cancellation point: usable before main, inside
// the allocator's own initialisation and in a signal handler.
#include "preload/diag.h"

#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "core/nocancel_io.h"

namespace lockswap {
namespace {

// Above the descriptors programs number by hand, below a common 1024 limit.
constexpr int kDiagFdFloor = 512;

std::atomic<int> g_diag_fd{-1};
dev_t g_diag_dev;
ino_t g_diag_ino;

}  // namespace

void take_diag_fd() {
  struct stat st;
  if (fstat(2, &st) != 0) return;  // started without a stderr: silent
  rlimit lim;
  int floor = kDiagFdFloor;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < 2u * kDiagFdFloor)
    floor = static_cast<int>(lim.rlim_cur / 2);
  int fd = fcntl(2, F_DUPFD_CLOEXEC, floor < 3 ? 3 : floor);
  if (fd < 0) return;
  g_diag_dev = st.st_dev;
  g_diag_ino = st.st_ino;
  g_diag_fd.store(fd, std::memory_order_release);
}

void drop_diag_fd() {
  int fd = g_diag_fd.exchange(-1);
  if (fd >= 0) nocancel::close(fd);
}

int diag_fd() {
  int fd = g_diag_fd.load(std::memory_order_acquire);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_dev != g_diag_dev || st.st_ino != g_diag_ino) return -1;
  return fd;
}

void diag(const char* s, size_t n) {
  int fd = diag_fd();
  while (fd >= 0 && n != 0) {
    ssize_t w = nocancel::write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void diag(const char* s) { diag(s, strlen(s)); }

void config_error(const char* var, const char* value, const char* why) { config_error(var, strlen(var), value, why); }

void config_error(const char* var, size_t var_len, const char* value, const char* why) {
  say_refused_setting(var, var_len, value, why);
  _exit(2);  // not exit(): the program's atexit handlers and destructors are not for a start that never reached main
}

}  // namespace lockswap
