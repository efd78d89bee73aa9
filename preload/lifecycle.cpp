// preload/lifecycle.cpp — start-up, fork and exit.
//
// Start-up only makes sure the configuration is parsed before main (so a bad
// setting stops the program there), installs the LOCKSWAP_STATS_SIGNAL
// handler and registers the fork handler. Nothing in
// lockswap depends on this constructor having run: the first lock call of
// the process parses the configuration itself.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include "core/cid.h"
#include "core/oncpu.h"
#include "core/lock_events.h"
#include "core/nocancel_io.h"
#include "core/percid_rwlock.h"
#include "core/thread_registry.h"
#include "preload/config.h"
#include "preload/stats.h"

namespace lockswap {
namespace {

void on_fork_child() {
  after_fork_in_child();
  cid::after_fork_in_child();
  percid::after_fork_in_child();
  rwsem_detail::after_fork_in_child();
  stats::after_fork_in_child();
}

void install_stats_signal();

__attribute__((constructor)) void lockswap_start() {
  load_config();
  install_stats_signal();
  stats::load_unwinder();
  pthread_atfork(nullptr, nullptr, on_fork_child);
}

// Statistics: kernel lock_event_counts style, one "name count" line per
// non-zero event, plus the variants that produced them; then the machine
// records of preload/stats_dump.cpp (per lock, per site, calls, maps). A dump
// is written with one write(2) from a buffer mapped for it, so processes of
// a forking server that exit together (O_APPEND) never interleave their
// lines. It runs at exit and in the LOCKSWAP_STATS_SIGNAL handler, so it is
// async-signal-safe in practice: snprintf only into stack buffers, no
// malloc, no stdio streams, strerrordesc_np (a static string) for errors;
// and it never acts on the interrupted thread's pending cancellation
// (core/nocancel_io.h).
template <class... A>
void add_line(stats::Out& o, const char* fmt, A... args) {
  char line[512];
  int n = snprintf(line, sizeof line, fmt, args...);
  if (n > 0) o.put(line, static_cast<size_t>(n) < sizeof line ? static_cast<size_t>(n) : sizeof line - 1);
}

void fill_stats(stats::Out& o) {
  add_line(o, "lockswap: pid %d mutex=%s rwlock=%s sem=%s cid=%s%s oncpu=%s\n", getpid(), variant_name(g_config.mutex),
           variant_name(g_config.rwlock), variant_name(g_config.sem), variant_name(cid::mode()),
           cid::rseq_fell_back() ? " (LOCKSWAP_CID=rseq: no kernel mm_cid, percpu used)" : "",
           oncpu::source_name(oncpu::source()));
#if LOCKSWAP_LOCK_EVENTS
  for (uint32_t i = 0; i < kNumLockEvents; ++i) {
    uint64_t v = lockevent_total(static_cast<LockEvent>(i));
    if (v != 0)
      add_line(o, "lockswap: %-24s %12llu  %s\n", kLockEventNames[i], static_cast<unsigned long long>(v),
               kLockEventMeanings[i]);
  }
#else
  add_line(o, "lockswap: lock events were compiled out (LOCKSWAP_LOCK_EVENTS=OFF)\n");
#endif
  stats::format_records(o, variant_name(g_config.mutex), variant_name(g_config.rwlock), variant_name(g_config.sem),
                        variant_name(cid::mode()));
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

std::atomic<bool> g_open_failure_reported{false};

// The statistics file, or stderr with a one-line reason when it cannot be
// opened (once per process, never silently dropped). A symlink is not
// followed.
int open_stats_fd() {
  if (g_config.stats_file == nullptr || *g_config.stats_file == '\0') return 2;
  char path[4096];
  int fd = -1, err = ENAMETOOLONG;
  if (expand_stats_path(path, sizeof path)) {
    fd = nocancel::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
    err = errno;
  }
  if (fd >= 0) return fd;
  if (!g_open_failure_reported.exchange(true)) {
    char why[4096 + 160];
    int n = snprintf(why, sizeof why, "lockswap: cannot open LOCKSWAP_STATS_FILE=%s (%s); statistics follow on stderr\n",
                     g_config.stats_file, strerrordesc_np(err));
    if (n > 0) (void)!nocancel::write(2, why, static_cast<size_t>(n) < sizeof why ? static_cast<size_t>(n) : sizeof why - 1);
  }
  return 2;
}

void write_all(int fd, const char* p, size_t n) {
  while (n != 0) {
    ssize_t w = nocancel::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

constexpr size_t kHumanLinesBound = 64 * 1024;

void print_stats() {
  size_t cap = kHumanLinesBound + stats::records_bound();
  void* mem = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) {
    static const char msg[] = "lockswap: cannot map a buffer for the statistics\n";
    (void)!nocancel::write(2, msg, sizeof msg - 1);
    return;
  }
  stats::Out o{static_cast<char*>(mem), cap};
  fill_stats(o);
  int fd = open_stats_fd();
  write_all(fd, o.text, o.len);
  if (fd != 2) nocancel::close(fd);
  munmap(mem, cap);
}

void on_stats_signal(int) {
  int saved = errno;
  print_stats();
  errno = saved;
}

// LOCKSWAP_STATS_SIGNAL: installed before main; a program that installs its
// own handler for the same signal replaces this one.
void install_stats_signal() {
  if (!g_config.stats || g_config.stats_signal == 0) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stats_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(g_config.stats_signal, &sa, nullptr);
}

__attribute__((destructor)) void lockswap_stop() {
  if (g_config.stats) print_stats();
  cid::release_process_ids();  // LOCKSWAP_CID=global: ids in the page shared with forked relatives
}

}  // namespace
}  // namespace lockswap
