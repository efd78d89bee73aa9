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
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "arch/clock.h"
#include "core/cid.h"
#include "core/oncpu.h"
#include "core/lock_events.h"
#include "core/nocancel_io.h"
#include "core/thread_registry.h"
#include "preload/config/config.h"
#include "preload/lwlock/lwlock.h"
#include "preload/stats/selected.h"
#include "preload/diag.h"
#include "preload/config/registry.h"
#include "preload/config/select.h"
#include "preload/stats/stats.h"
#include "preload/stats/backtrace.h"
#include "preload/wtlock/wtlock.h"

namespace lockswap {
namespace {

// The process-wide steps stay here, not in an adapter: the thread registry
// and the cid allocator serve every variant (in this order: the surviving
// thread's cid switch-in takes its id from, and counts an event in, the
// registry slot re-stamped and zeroed just before), and
// the statistics count them all. The adapters' hooks only reset spin locks
// and counters of their own, after those.
void on_fork_child() {
  after_fork_in_child();
  cid::after_fork_in_child();
  variants_after_fork_in_child();
  wtlock::after_fork_in_child();
  stats::after_fork_in_child();
  stats::clear_selected_events();
}

void install_stats_signal();

__attribute__((constructor)) void lockswap_start() {
  load_config();
  if (g_config.stats) stats::mark_start();
  install_stats_signal();
  stats::load_unwinder();
  pthread_atfork(nullptr, nullptr, on_fork_child);
}

// Statistics: kernel lock_event_counts style, one "name count" line per
// non-zero event, plus the variants that produced them; then the machine
// records of preload/stats/dump.cpp. A dump is written with one write(2)
// from a buffer mapped for it, so processes of a forking server that exit
// together (O_APPEND) never interleave their lines. It runs at exit and in
// the LOCKSWAP_STATS_SIGNAL handler, so it is async-signal-safe in practice:
// numbers formatted by hand, no malloc, no stdio, strerrordesc_np (a static
// string) for errors, large buffers in the mapping rather than on the stack
// (the handler may run on a small alternate stack); and it never acts on the
// interrupted thread's pending cancellation (core/nocancel_io.h).
void fill_stats(stats::Out& o, char* scratch, uint64_t signals_dropped) {
  o.put("lockswap: pid ");
  o.dec(static_cast<uint64_t>(getpid()));
  const char* const pairs[][2] = {{" mutex=", variant_name(g_config.mutex)},
                                  {" rwlock=", variant_name(g_config.rwlock)},
                                  {" sem=", variant_name(g_config.sem)},
                                  {" cid=", variant_name(cid::mode())}};
  for (const auto& kv : pairs) {
    o.put(kv[0]);
    o.put(kv[1]);
  }
  if (cid::rseq_fell_back()) o.put(" (LOCKSWAP_CID=rseq: no kernel mm_cid, percpu used)");
  if (g_config.wtlock != WtlockVariant::off && g_config.wtlock != WtlockVariant::unset) {
    o.put(" wtlock=");  // said only when asked for: WiredTiger's rwlocks are swapped
    o.put(variant_name(g_config.wtlock));
  }
  if (lwlock::redirected()) {
    o.put(" lwlock=");  // PostgreSQL's LWLocks run on lockswap's algorithms
    o.put(variant_name(g_config.lwlock));
  }
  o.put(" oncpu=");
  o.put(oncpu::source_name(oncpu::source()));
  o.put(g_config.profile ? " stats=profile\n" : " stats=counts\n");
#if LOCKSWAP_LOCK_EVENTS
  for (uint32_t i = 0; i < kNumLockEvents; ++i) {
    uint64_t v = lockevent_total(static_cast<LockEvent>(i));
    if (v == 0) continue;
    o.put("lockswap: ");
    o.put_left(kLockEventNames[i], 24);
    o.put(" ");
    o.dec_right(v, 12);
    o.put("  ");
    o.put(kLockEventMeanings[i]);
    o.put("\n");
  }
#else
  o.put("lockswap: lock events were compiled out (LOCKSWAP_LOCK_EVENTS=OFF)\n");
#endif
  if (signals_dropped != 0) {
    o.put("lockswap: ");
    o.dec(signals_dropped);
    o.put(" statistics signal(s) dropped: at most one dump per 100 ms\n");
  }
  stats::DumpHeader h{variant_name(g_config.mutex), variant_name(g_config.rwlock), variant_name(g_config.sem),
                      variant_name(cid::mode()),   g_config.profile,               signals_dropped,
                      variant_name(g_config.wtlock)};
  stats::format_records(o, h, scratch);
}

bool has_pid_pattern(const char* p) { return strstr(p, "%p") != nullptr; }

// LOCKSWAP_STATS_FILE with every "%p" replaced by the pid (one file per
// process of a forking server), into `out` (kScratchBytes). False if it does
// not fit.
bool expand_stats_path(char* out) {
  char pid[16];
  stats::Out pid_text{pid, sizeof pid};
  pid_text.dec(static_cast<uint64_t>(getpid()));
  size_t n = 0;
  for (const char* p = g_config.stats_file; *p; ++p) {
    const char* piece = p;
    size_t len = 1;
    if (p[0] == '%' && p[1] == 'p') {
      piece = pid;
      len = pid_text.len;
      ++p;
    }
    if (n + len >= stats::kScratchBytes) return false;
    memcpy(out + n, piece, len);
    n += len;
  }
  out[n] = '\0';
  return true;
}

// The process that created this pid's file (O_EXCL): its later dumps append.
std::atomic<pid_t> g_created_by{0};

// Why the opened statistics file is not one to write to, or null. Only a
// regular file the effective user owns with no other name: a FIFO would
// block the exit, a hard link or someone else's file would put lockswap's
// output where the caller of a program cannot write themselves.
const char* unsuitable(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return "cannot stat it";
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_uid != geteuid()) return "owned by another user";
  if (st.st_nlink != 1) return "a file with more than one link";
  return nullptr;
}

std::atomic<bool> g_open_failure_reported{false};

void report_open_failure(const char* path, const char* why) {
  if (g_open_failure_reported.exchange(true)) return;
  char text[640];
  stats::Out m{text, sizeof text - 1};
  m.put("lockswap: cannot open LOCKSWAP_STATS_FILE=");
  m.escaped(path, strnlen(path, 256));
  m.put(" (");
  m.put(why);
  m.put("); statistics follow on stderr");
  text[m.len] = '\n';
  diag(text, m.len + 1);
}

// The statistics file, or lockswap's stderr (-1: none) with a one-line
// reason when it cannot be used (once per process, never silently dropped).
// `path` is scratch room (kScratchBytes).
int open_stats_fd(char* path) {
  if (g_config.stats_file == nullptr || *g_config.stats_file == '\0') return diag_fd();
  if (!expand_stats_path(path)) {
    report_open_failure(g_config.stats_file, strerrordesc_np(ENAMETOOLONG));
    return diag_fd();
  }
  // A fresh pid's file must not exist yet: one planted there is refused.
  bool fresh = has_pid_pattern(g_config.stats_file) && g_created_by.load() != getpid();
  int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (fresh ? O_EXCL : 0);
  int fd = nocancel::open(path, flags, 0600);
  const char* why = fd < 0 ? strerrordesc_np(errno) : unsuitable(fd);
  if (why == nullptr) {
    if (fresh) g_created_by.store(getpid());
    return fd;
  }
  if (fd >= 0) nocancel::close(fd);
  report_open_failure(path, why);
  return diag_fd();
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

std::atomic<uint64_t> g_signals_dropped{0};

void print_stats() {
  size_t cap = kHumanLinesBound + stats::records_bound();
  size_t bytes = cap + stats::kScratchBytes;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) {
    diag("lockswap: cannot map a buffer for the statistics\n");
    return;
  }
  char* scratch = static_cast<char*>(mem) + cap;
  stats::Out o{static_cast<char*>(mem), cap};
  fill_stats(o, scratch, g_signals_dropped.load(std::memory_order_relaxed));
  int fd = open_stats_fd(scratch);
  if (fd >= 0) write_all(fd, o.text, o.len);
  if (fd >= 0 && fd != diag_fd()) nocancel::close(fd);
  munmap(mem, bytes);
}

// One dump at a time; a signal dump at most every kSignalDumpGapNs. Signals
// that come sooner, or while a dump is being written, are counted (the next
// dump says how many) and dropped: a burst of signals cannot keep the
// process writing.
constexpr uint64_t kSignalDumpGapNs = 100'000'000;
std::atomic<bool> g_dumping{false};
std::atomic<uint64_t> g_last_signal_dump_ns{0};

// The gap is checked by the thread that holds g_dumping, so two threads
// signalled at once cannot both pass it.
bool claim_signal_dump() {
  if (g_dumping.exchange(true, std::memory_order_acquire)) return false;
  uint64_t now = arch::monotonic_ns();
  uint64_t last = g_last_signal_dump_ns.load(std::memory_order_relaxed);
  if (last != 0 && now - last < kSignalDumpGapNs) {
    g_dumping.store(false, std::memory_order_release);
    return false;
  }
  g_last_signal_dump_ns.store(now, std::memory_order_relaxed);
  return true;
}

void on_stats_signal(int) {
  int saved = errno;
  if (claim_signal_dump()) {
    print_stats();
    g_dumping.store(false, std::memory_order_release);
  } else {
    g_signals_dropped.fetch_add(1, std::memory_order_relaxed);
  }
  errno = saved;
}

// The exit dump waits (up to about a second) for a signal's dump being
// written on another thread, then writes anyway.
void print_exit_stats() {
  bool mine = false;
  for (int i = 0; i < 1000 && !(mine = !g_dumping.exchange(true, std::memory_order_acquire)); ++i) {
    timespec ms{0, 1'000'000};
    syscall(SYS_nanosleep, &ms, nullptr);  // nanosleep() is a cancellation point
  }
  print_stats();
  if (mine) g_dumping.store(false, std::memory_order_release);
}

// "signal N (USR2)" for the messages below.
void say_signal(stats::Out& m, int sig) {
  m.put("LOCKSWAP_STATS_SIGNAL: signal ");
  m.dec(static_cast<uint64_t>(sig));
  if (const char* name = sigabbrev_np(sig)) {
    m.put(" (SIG");
    m.put(name);
    m.put(")");
  }
}

// LOCKSWAP_STATS_SIGNAL: installed before main, only over the default
// action. A signal the process inherited as ignored stays ignored (whoever
// started it wants it so), one another library already handles stays
// theirs; either is said once. A program that installs its own handler
// later replaces ours. SA_ONSTACK: a thread with an alternate signal stack
// runs the dump there (its frames are small, see print_stats).
void install_stats_signal() {
  if (!g_config.stats || g_config.stats_signal == 0) return;
  int sig = g_config.stats_signal;
  struct sigaction old;
  if (sigaction(sig, nullptr, &old) != 0) return;
  if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) {
    char text[160];
    stats::Out m{text, sizeof text};
    m.put("lockswap: ");
    say_signal(m, sig);
    m.put(old.sa_handler == SIG_IGN && (old.sa_flags & SA_SIGINFO) == 0
              ? " is ignored in this process (inherited): left ignored, no dumps on it\n"
              : " already has a handler: left alone, no dumps on it\n");
    diag(text, m.len);
    return;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stats_signal;
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
}

__attribute__((destructor)) void lockswap_stop() {
  cid::count_process_cpu();  // LOCKSWAP_CID_SWITCH=1: the share's denominator, before the dump
  if (g_config.stats) print_exit_stats();
  cid::release_process_ids();  // LOCKSWAP_CID=global: ids in the page shared with forked relatives
}

}  // namespace
}  // namespace lockswap
