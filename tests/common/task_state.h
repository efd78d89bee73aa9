/* tests/common/task_state.h — the scheduler state ('R', 'S', ...) of a task
 * from its /proc stat file, for the C and the C++ test programs alike (C++
 * ones reach it through test_support.h). 0 when it cannot be read. */
#pragma once
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* The state field of a /proc .../stat file: the character after "(comm) ". */
static inline char lstest_stat_file_state(const char* path) {
  char buf[512];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = strrchr(buf, ')');
  return (p != NULL && p[1] == ' ') ? p[2] : 0;
}

/* A thread of this process, by its TID. */
static inline char lstest_thread_state(pid_t tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  return lstest_stat_file_state(path);
}
