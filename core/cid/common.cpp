// core/cid/common.cpp — what every concurrency-id allocator shares: which
// one runs (select), the switch model, the fork child's reset, the count of
// possible CPUs and the slow-path clock (design: core/cid.h; the allocators:
// core/cid/{global,percpu,rseq,thread}.cpp).
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "core/cid.h"
#include "core/cid/internal.h"
#include "core/nocancel_io.h"
#include "core/wait_ctx.h"

namespace lockswap {
namespace cid {

__thread ThreadCid t_cid __attribute__((tls_model("initial-exec"))) = {-1, false, 0, 0, false, false, 0};
std::atomic<CidMode> g_mode{CidMode::thread};
uint64_t g_clock_cost_ns = 0;
uint32_t g_ncpus = 1;

namespace {

CidMode g_requested = CidMode::thread;

// The clock's own cost, subtracted from every slow-path sample (the
// fastest of a few tries).
void calibrate_clock() {
  uint64_t best = ~uint64_t{0};
  for (int i = 0; i < 8; ++i) {
    uint64_t a = thread_cpu_ns(), b = thread_cpu_ns();
    if (b - a < best) best = b - a;
  }
  g_clock_cost_ns = best;
}

bool g_switch_model = false;

void install_hooks(bool global) {
  void (*before)() = g_switch_model ? &switch_out : global ? &put_global : nullptr;
  g_before_sleep_hook.store(before, std::memory_order_relaxed);
  g_after_sleep_hook.store(g_switch_model ? &switch_in : nullptr, std::memory_order_relaxed);
  thread_registry::g_thread_exit_hook.store(global ? &put_global : nullptr, std::memory_order_relaxed);
}

}  // namespace

// ------------------------------------------------------------- lifecycle

CidMode select(CidMode requested) {
  if (mode() == CidMode::global) put_global();
  g_requested = requested;
  note_own_pid();
  calibrate_clock();
  uint32_t ncpus = possible_cpus();
  g_ncpus = ncpus > kMaxCpus ? kMaxCpus : ncpus;
  CidMode m = rseq_or_percpu(requested);
  if (m == CidMode::global && !attach_ids_page()) m = CidMode::percpu;
  if (m != requested) lockevent_inc(LockEvent::cid_fallback);
  if (m == CidMode::percpu) reset_percpu();
  forget_thread_state();
  install_hooks(m == CidMode::global);
  g_mode.store(m, arch::mo_hint);
  return m;
}

namespace {
// The highest number in a sysfs CPU list ("0-127", "0,2-5"), or -1.
int highest_in_cpu_list(const char* list, ssize_t len) {
  int highest = -1, value = -1;
  for (ssize_t i = 0; i <= len; ++i) {
    char c = i < len ? list[i] : '\n';
    if (c >= '0' && c <= '9') {
      value = (value < 0 ? 0 : value * 10) + (c - '0');
    } else {
      if (value > highest) highest = value;
      value = -1;
    }
  }
  return highest;
}

// Fallback: the highest CPU this thread may run on.
int highest_in_affinity() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  for (int cpu = CPU_SETSIZE - 1; cpu > 0; --cpu)
    if (CPU_ISSET(cpu, &set)) return cpu;
  return 0;
}
}  // namespace

uint32_t possible_cpus() {
  // Reached lazily from a lock call (the percid arena's first use): no
  // cancellation point here (core/nocancel_io.h).
  char buf[256];
  std::size_t n = nocancel::read_small_file("/sys/devices/system/cpu/possible", buf, sizeof buf);
  int highest = n > 0 ? highest_in_cpu_list(buf, static_cast<ssize_t>(n)) : -1;
  if (highest < 0) highest = highest_in_affinity();
  return static_cast<uint32_t>(highest) + 1;
}

CidMode requested_mode() { return g_requested; }

// The forking thread's global id is its parent twin's: forget it, free
// nothing, and leave the shared lock alone (its holder lives in another
// process). percpu's per-process state starts over. A child that runs no
// atfork handler (raw clone) does the global part at its first slow path.
void after_fork_in_child() {
  start_new_process();
  if (mode() == CidMode::percpu) reset_percpu();
  if (g_switch_model) switch_in();  // the child's first thread runs: it holds an id
}

void set_switch_model(bool on) {
  g_switch_model = on;
  install_hooks(mode() == CidMode::global);
  if (on) switch_in();
}

bool switch_model() { return g_switch_model; }

namespace {
// Runs `step` unless the thread is inside another switch already: a signal
// handler that waits (nanosleep, poll, sigwait are async-signal-safe) while
// the interrupted thread holds the cid_lock must not ask for it again.
template <class Step>
void switch_step(LockEvent event, Step step) {
  if (t_cid.switching) return;
  t_cid.switching = true;
  int saved = errno;
  lockevent_inc(event);
  step();
  errno = saved;
  t_cid.switching = false;
}
}  // namespace

void switch_out() {
  switch_step(LockEvent::cid_switch_out, [] {
    if (mode() == CidMode::global) put_global();  // percpu, rseq, thread: the id stays where it is
  });
}

void switch_in() {
  switch_step(LockEvent::cid_switch_in, [] { (void)current(); });
}

void count_process_cpu() {
  if (!g_switch_model) return;
  timespec ts;
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return;
  lockevent_add(LockEvent::cid_switch_cpu_ns,
                static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec));
}
uint32_t ids_in_use() { return mode() == CidMode::global ? global_ids_in_use() : percpu_ids_in_use(); }

}  // namespace cid
}  // namespace lockswap
