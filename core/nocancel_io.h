// core/nocancel_io.h — file I/O that never acts on a thread cancellation.
//
// Lock calls are not cancellation points (POSIX), but open(2), read(2),
// write(2) and close(2) are: glibc acts on a pending deferred cancellation
// inside them. lockswap reaches files lazily from lock calls (the percid
// arena's first use reads the CPU count), from the LOCKSWAP_STATS_SIGNAL
// handler (on whatever thread the signal interrupts) and at exit, so it uses
// these instead: glibc's syscall() is not a cancellation point. Failures set
// errno as the libc calls do. No allocation; usable before constructors run.
#pragma once
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>

namespace lockswap::nocancel {

inline int open(const char* path, int flags, mode_t mode = 0) {
  return static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, flags, mode));
}
inline ssize_t read(int fd, void* buf, std::size_t n) { return syscall(SYS_read, fd, buf, n); }
inline ssize_t write(int fd, const void* buf, std::size_t n) { return syscall(SYS_write, fd, buf, n); }
inline void close(int fd) { syscall(SYS_close, fd); }

// Reads up to size-1 bytes of `path` into buf, NUL-terminated; the number of
// bytes read (0 if the file could not be opened or is empty).
inline std::size_t read_small_file(const char* path, char* buf, std::size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  std::size_t n = 0;
  if (fd >= 0) {
    while (n + 1 < size) {
      ssize_t r = read(fd, buf + n, size - 1 - n);
      if (r <= 0) break;
      n += static_cast<std::size_t>(r);
    }
    close(fd);
  }
  if (size > 0) buf[n] = '\0';
  return n;
}

}  // namespace lockswap::nocancel
