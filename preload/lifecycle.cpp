// preload/lifecycle.cpp — start-up, fork and exit.
//
// Start-up only makes sure the configuration is parsed before main (so a bad
// setting stops the program there) and registers the fork handler. Nothing in
// lockswap depends on this constructor having run: the first lock call of
// the process parses the configuration itself.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/cid.h"
#include "core/oncpu.h"
#include "core/lock_events.h"
#include "core/percid_rwlock.h"
#include "core/thread_registry.h"
#include "preload/config.h"

namespace lockswap {
namespace {

void on_fork_child() {
  after_fork_in_child();
  cid::after_fork_in_child();
  percid::after_fork_in_child();
}

__attribute__((constructor)) void lockswap_start() {
  load_config();
  pthread_atfork(nullptr, nullptr, on_fork_child);
}

// Statistics: kernel lock_event_counts style, one "name count" line per
// non-zero event, plus the variants that produced them. A process's block is
// written with one write(2), so processes of a forking server that exit
// together (O_APPEND) never interleave their lines.
struct Block {
  char text[16384];
  size_t len = 0;
  template <class... A>
  void add(const char* fmt, A... args) {
    int n = snprintf(text + len, sizeof text - len, fmt, args...);
    if (n > 0) len = len + static_cast<size_t>(n) < sizeof text ? len + static_cast<size_t>(n) : sizeof text - 1;
  }
};

void fill_stats(Block& b) {
  b.add("lockswap: pid %d mutex=%s rwlock=%s sem=%s cid=%s%s oncpu=%s\n", getpid(), variant_name(g_config.mutex),
        variant_name(g_config.rwlock), variant_name(g_config.sem), variant_name(cid::mode()),
        cid::rseq_fell_back() ? " (LOCKSWAP_CID=rseq: no kernel mm_cid, percpu used)" : "",
        oncpu::source_name(oncpu::source()));
#if LOCKSWAP_LOCK_EVENTS
  for (uint32_t i = 0; i < kNumLockEvents; ++i) {
    uint64_t v = lockevent_total(static_cast<LockEvent>(i));
    if (v != 0)
      b.add("lockswap: %-24s %12llu  %s\n", kLockEventNames[i], static_cast<unsigned long long>(v),
            kLockEventMeanings[i]);
  }
#else
  b.add("lockswap: lock events were compiled out (LOCKSWAP_LOCK_EVENTS=OFF)\n");
#endif
}

// LOCKSWAP_STATS_FILE with every "%p" replaced by the pid (one file per
// process of a forking server). False if it does not fit.
bool expand_stats_path(char* out, size_t size) {
  size_t n = 0;
  for (const char* p = g_config.stats_file; *p; ++p) {
    char pid[16];
    const char* piece = p;
    size_t len = 1;
    if (p[0] == '%' && p[1] == 'p') {
      len = static_cast<size_t>(snprintf(pid, sizeof pid, "%d", getpid()));
      piece = pid;
      ++p;
    }
    if (n + len >= size) return false;
    memcpy(out + n, piece, len);
    n += len;
  }
  out[n] = '\0';
  return true;
}

// The statistics file, or stderr with a one-line reason when it cannot be
// opened (never silently dropped). A symlink is not followed.
int open_stats_fd() {
  if (g_config.stats_file == nullptr || *g_config.stats_file == '\0') return 2;
  char path[4096];
  int fd = -1, err = ENAMETOOLONG;
  if (expand_stats_path(path, sizeof path)) {
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
    err = errno;
  }
  if (fd >= 0) return fd;
  Block why;
  why.add("lockswap: cannot open LOCKSWAP_STATS_FILE=%s (%s); statistics follow on stderr\n",
          g_config.stats_file, strerror(err));
  (void)!write(2, why.text, why.len);
  return 2;
}

void print_stats() {
  Block b;
  fill_stats(b);
  int fd = open_stats_fd();
  (void)!write(fd, b.text, b.len);
  if (fd != 2) close(fd);
}

__attribute__((destructor)) void lockswap_stop() {
  if (g_config.stats) print_stats();
  cid::release_process_ids();  // LOCKSWAP_CID=global: ids in the page shared with forked relatives
}

}  // namespace
}  // namespace lockswap
