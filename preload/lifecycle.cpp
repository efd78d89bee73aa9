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
#include "preload/stats/selected.h"
#include "preload/diag.h"
#include "preload/pthread/adapters.h"
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

std::atomic<uint64_t> g_signals_dropped{0};

void print_stats() { stats::write_dump(g_signals_dropped.load(std::memory_order_relaxed)); }

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
