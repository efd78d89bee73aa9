// preload/lifecycle.cpp — start-up, fork and exit.
//
// Start-up only makes sure the configuration is parsed before main (so a bad
// setting stops the program there) and registers the fork handler. Nothing in
// lockswap depends on this constructor having run: the first lock call of
// the process parses the configuration itself.
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/cid.h"
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
// non-zero event, plus the variants that produced them.
void print_stats() {
  int fd = 2;
  bool close_fd = false;
  if (g_config.stats_file && *g_config.stats_file) {
    int f = open(g_config.stats_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (f >= 0) { fd = f; close_fd = true; }
  }
  char line[256];
  int n = snprintf(line, sizeof line, "lockswap: pid %d mutex=%s rwlock=%s cid=%s%s\n", getpid(),
                   mutex_variant_name(g_config.mutex), rwlock_variant_name(g_config.rwlock),
                   cid_variant_name(cid::mode()),
                   cid::rseq_fell_back() ? " (LOCKSWAP_CID=rseq: no kernel mm_cid, percpu used)" : "");
  (void)!write(fd, line, static_cast<size_t>(n));
#if LOCKSWAP_LOCK_EVENTS
  for (uint32_t i = 0; i < kNumLockEvents; ++i) {
    uint64_t v = lockevent_total(static_cast<LockEvent>(i));
    if (v == 0) continue;
    n = snprintf(line, sizeof line, "lockswap: %-24s %12llu  %s\n", kLockEventNames[i],
                 static_cast<unsigned long long>(v), kLockEventMeanings[i]);
    (void)!write(fd, line, static_cast<size_t>(n));
  }
#else
  static const char off[] = "lockswap: lock events were compiled out (LOCKSWAP_LOCK_EVENTS=OFF)\n";
  (void)!write(fd, off, sizeof off - 1);
#endif
  if (close_fd) close(fd);
}

__attribute__((destructor)) void lockswap_stop() {
  if (g_config.stats) print_stats();
  cid::release_process_ids();  // LOCKSWAP_CID=global: ids in the page shared with forked relatives
}

}  // namespace
}  // namespace lockswap
