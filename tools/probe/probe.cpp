// tools/probe/probe.cpp — lockswap-probe: the facts about this machine
// that decide whether a lock benchmark measures the lock or the machine
// (docs/measuring.md). Standalone: no lockswap code, no LD_PRELOAD needed.
//
//   lockswap-probe c2c [CPU_A CPU_B]   one line: c2c_ns=N cpus=A,B (< 100 ms)
//   lockswap-probe summary             one line: env: cpus=... (for table headers)
//   lockswap-probe facts               key=value lines, everything below
//                                       (what `lockswap doctor` reads)
//
// c2c: two threads pinned to two allowed CPUs bounce one cache line; the
// median over batches of the time per round trip. On a VM whose vCPUs the
// host moves, this number jumps between modes within seconds: a benchmark
// round is only comparable to another when the probe before and after it
// agree (lockswap_stats.steady_round).
// wake: a waker spinning on its CPU wakes a futex sleeper while another CPU is
// idle; the share of wake-ups the scheduler places on the waker's (busy) CPU.
// Where that share is high, a woken lock waiter queues behind its waker
// instead of running on the idle CPU.
// wake_remote: the same wake-up sent to a sleeper pinned to another CPU,
// once with that CPU otherwise idle and once with an idle-class thread
// (SCHED_IDLE) keeping it busy, which any woken thread preempts at once. Slow
// when idle and fast when busy: the CPU is slow to leave its idle state
// (deep C-states, a host that deschedules halted vCPUs). Slow both ways: the
// host is slow to deliver a wake-up to another vCPU, whatever it runs.
// spread: twice as many runnable threads as CPUs, in pairs that pass a turn
// back and forth through futex wake-ups (each turn 20 µs of work), the way
// lock waiters sleep and wake; the CPU time they got per second of wall time.
// A scheduler that spreads them uses every CPU; one that packs runnable
// threads onto fewer vCPUs (some hosts' guest kernels do, by boot option)
// leaves CPUs idle while threads queue, and every sleeping lock's
// oversubscribed cell then measures fewer CPUs than the machine has.
// sched_boot_options: the kernel command line's scheduler options, those
// upstream Linux does not have marked "(patched)".
#include <errno.h>
#include <glob.h>
#include <linux/bpf.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

// Many short batches: a batch in which either thread lost its CPU is an
// outlier the median ignores, as long as most batches ran undisturbed.
constexpr int kC2cBatches = 201;              // median over up to this many batches
constexpr int kC2cRoundTripsPerBatch = 25;    // one batch: ~2.5 µs at 100 ns, ~25 µs at 1 µs
constexpr int64_t kC2cDeadlineNs = 40'000'000;  // the whole c2c run stays under the contract's 100 ms
constexpr int kWakeSamples = 40;
constexpr int64_t kWakeSettleNs = 200'000;    // the waker spins this long after the sleeper said it sleeps
constexpr int64_t kWakeDeadlineNs = 50'000'000;  // one wake-up that takes longer counts as lost
constexpr int kClockCalls = 200'000;
constexpr int kMaxPairsAll = 8;               // every pair up to this many CPUs, a sample beyond
constexpr int kSampledPairs = 12;
constexpr int64_t kMinStealWindowNs = 500'000'000;  // steal % needs a window of several clock ticks
constexpr int kSpreadPairsPerCpu = 2;         // runnable threads: one per pair, twice the CPUs
constexpr int64_t kSpreadTurnNs = 20'000;     // work per turn, about a contended critical section and more
constexpr int64_t kSpreadRunNs = 400'000'000;

static_assert(kC2cBatches % 2 == 1, "an odd batch count has a true median");

int64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}
int64_t now_ns() { return clock_ns(CLOCK_MONOTONIC); }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield" ::: "memory");
#endif
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

bool pin_self(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// ---- core-to-core round trip --------------------------------------------

struct alignas(128) PingLine {
  std::atomic<uint64_t> seq{0};  // odd: ping in flight, even: answered
};

struct C2cRun {
  PingLine line;
  alignas(128) std::atomic<bool> stop{false};
  std::atomic<int> ready{0};
};

// Waits until `seq` reaches `want` or the run is stopped; false when stopped.
bool wait_for(const C2cRun& run, uint64_t want) {
  for (unsigned spins = 0; run.line.seq.load(std::memory_order_acquire) != want; ++spins) {
    cpu_relax();
    if ((spins & 1023) == 0 && run.stop.load(std::memory_order_relaxed)) return false;
  }
  return true;
}

void c2c_answerer(C2cRun& run, int cpu) {
  pin_self(cpu);
  run.ready.fetch_add(1);
  for (uint64_t odd = 1;; odd += 2) {
    if (!wait_for(run, odd)) return;
    run.line.seq.store(odd + 1, std::memory_order_release);
  }
}

// The pinger: batches of round trips until enough batches or the deadline.
std::vector<double> c2c_pinger(C2cRun& run, int cpu, int64_t deadline) {
  pin_self(cpu);
  run.ready.fetch_add(1);
  while (run.ready.load() < 2 && now_ns() < deadline) cpu_relax();
  std::vector<double> per_trip;
  uint64_t seq = 0;
  for (int b = 0; b < kC2cBatches && now_ns() < deadline; ++b) {
    const int64_t t0 = now_ns();
    int done = 0;
    for (; done < kC2cRoundTripsPerBatch; ++done) {
      run.line.seq.store(++seq, std::memory_order_release);
      if (!wait_for(run, ++seq)) break;
    }
    if (done < kC2cRoundTripsPerBatch) break;
    per_trip.push_back(double(now_ns() - t0) / kC2cRoundTripsPerBatch);
  }
  run.stop.store(true);
  return per_trip;
}

// Median round trip between two CPUs in ns; 0 when no batch completed.
long c2c_ns(int a, int b) {
  C2cRun run;
  const int64_t deadline = now_ns() + kC2cDeadlineNs;
  std::vector<double> trips;
  std::thread answer([&] { c2c_answerer(run, b); });
  std::thread ping([&] {
    trips = c2c_pinger(run, a, deadline);
    run.stop.store(true);
  });
  // The deadline also frees an answerer whose pinger never got a CPU.
  while (!run.stop.load() && now_ns() < deadline + 20'000'000) usleep(1000);
  run.stop.store(true);
  ping.join();
  answer.join();
  if (trips.empty()) return 0;
  std::nth_element(trips.begin(), trips.begin() + trips.size() / 2, trips.end());
  return std::lround(trips[trips.size() / 2]);
}

// ---- wake placement -----------------------------------------------------

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op | FUTEX_PRIVATE_FLAG, val, timeout, nullptr, 0);
}

struct WakeRun {
  std::atomic<uint32_t> word{0};       // 0: sleep, 1: woken
  std::atomic<int> sleeping{0};        // the sleeper is about to wait (sample number)
  std::atomic<int> woke_on{-1};        // CPU the sleeper ran on after the wake
  std::atomic<int64_t> woke_at{0};
};

struct WakeResult {
  int samples = 0, on_waker = 0, lost = 0;
  double mean_us = 0, max_us = 0;
};

void wake_sleeper(WakeRun& run, int cpu) {
  if (cpu >= 0) pin_self(cpu);
  for (int i = 1; i <= kWakeSamples; ++i) {
    run.sleeping.store(i, std::memory_order_release);
    const timespec limit{0, kWakeDeadlineNs};
    while (run.word.load(std::memory_order_acquire) == 0) futex(&run.word, FUTEX_WAIT, 0, &limit);
    run.woke_at.store(now_ns(), std::memory_order_relaxed);
    run.woke_on.store(sched_getcpu(), std::memory_order_release);
    while (run.word.load(std::memory_order_acquire) != 0) cpu_relax();  // the waker rearms
  }
}

void spin_until(int64_t t) {
  while (now_ns() < t) cpu_relax();
}

// One wake-up: the waker keeps its CPU busy before, during and after.
void one_wake(WakeRun& run, int sample, int waker_cpu, WakeResult& r) {
  while (run.sleeping.load(std::memory_order_acquire) != sample) cpu_relax();
  spin_until(now_ns() + kWakeSettleNs);
  run.woke_on.store(-1);
  const int64_t t0 = now_ns();
  run.word.store(1, std::memory_order_release);
  futex(&run.word, FUTEX_WAKE, 1, nullptr);
  const int64_t limit = t0 + kWakeDeadlineNs;
  int cpu;
  while ((cpu = run.woke_on.load(std::memory_order_acquire)) < 0 && now_ns() < limit) cpu_relax();
  if (cpu < 0) {
    ++r.lost;
    while ((cpu = run.woke_on.load(std::memory_order_acquire)) < 0) usleep(100);
  } else {
    const double us = double(run.woke_at.load() - t0) / 1000.0;
    r.mean_us += us;
    r.max_us = std::max(r.max_us, us);
    r.on_waker += cpu == waker_cpu;
    ++r.samples;
  }
  run.word.store(0, std::memory_order_release);
}

// Where the sleeper may run: anywhere (the scheduler places it), or pinned
// to one CPU that is otherwise idle or kept busy by an idle-class spinner.
struct WakeTarget {
  int sleeper_cpu = -1;
  bool busy = false;
};

// Spins at SCHED_IDLE on `cpu` until stopped: the CPU never enters its idle
// state, yet every normal thread woken there preempts the spinner at once.
// `ready`: 1 spinning, -1 it could not be pinned or made idle-class (then
// it does not spin: a normal-priority spinner would delay the wake-ups).
void keep_busy(int cpu, const std::atomic<bool>& stop, std::atomic<int>& ready) {
  sched_param none{};
  const bool ok = pin_self(cpu) && pthread_setschedparam(pthread_self(), SCHED_IDLE, &none) == 0;
  ready.store(ok ? 1 : -1, std::memory_order_release);
  while (ok && !stop.load(std::memory_order_relaxed)) cpu_relax();
}

// nullopt: the busy target could not be set up.
std::optional<WakeResult> measure_wakes(int waker_cpu, WakeTarget target) {
  WakeRun run;
  WakeResult r;
  std::atomic<bool> stop{false};
  std::atomic<int> ready{0};
  std::thread spinner;
  if (target.busy) {
    spinner = std::thread([&] { keep_busy(target.sleeper_cpu, stop, ready); });
    while (ready.load(std::memory_order_acquire) == 0) usleep(100);
    if (ready.load() < 0) {
      spinner.join();
      return std::nullopt;
    }
  }
  std::thread sleeper([&] { wake_sleeper(run, target.sleeper_cpu); });
  std::thread waker([&] {
    pin_self(waker_cpu);
    for (int i = 1; i <= kWakeSamples; ++i) one_wake(run, i, waker_cpu, r);
  });
  waker.join();
  sleeper.join();
  stop.store(true);
  if (spinner.joinable()) spinner.join();
  if (r.samples) r.mean_us /= r.samples;
  return r;
}

// ---- spread under sleep/wake load ----------------------------------------

// One pair: a turn word each side futex-waits on; the side holding the turn
// works, then hands it to the other and sleeps.
struct alignas(128) SpreadPair {
  std::atomic<uint32_t> turn{0};  // 0 or 1: whose turn
};

struct SpreadRun {
  std::vector<SpreadPair> pairs;
  std::atomic<bool> stop{false};
};

void spread_side(SpreadRun& run, SpreadPair& pair, uint32_t me) {
  for (;;) {
    uint32_t t;
    while ((t = pair.turn.load(std::memory_order_acquire)) != me && !run.stop.load(std::memory_order_relaxed))
      futex(&pair.turn, FUTEX_WAIT, t, nullptr);
    if (run.stop.load(std::memory_order_relaxed)) return;
    spin_until(now_ns() + kSpreadTurnNs);
    pair.turn.store(me ^ 1, std::memory_order_release);
    futex(&pair.turn, FUTEX_WAKE, 1, nullptr);
  }
}

struct SpreadResult {
  int runnable = 0;
  double cpus_used = 0;
};

SpreadResult spread(size_t cpus) {
  SpreadRun run;
  run.pairs = std::vector<SpreadPair>(cpus * kSpreadPairsPerCpu);
  std::vector<std::thread> threads;
  for (auto& pair : run.pairs)
    for (uint32_t side = 0; side < 2; ++side) threads.emplace_back([&run, &pair, side] { spread_side(run, pair, side); });
  const int64_t t0 = now_ns(), c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  usleep(static_cast<useconds_t>(kSpreadRunNs / 1000));
  const double used = double(clock_ns(CLOCK_PROCESS_CPUTIME_ID) - c0) / double(now_ns() - t0);
  run.stop.store(true);
  for (auto& pair : run.pairs) {
    pair.turn.fetch_xor(1);  // any change frees a sleeper that saw the old value
    futex(&pair.turn, FUTEX_WAKE, 2, nullptr);
  }
  for (auto& t : threads) t.join();
  return {static_cast<int>(run.pairs.size()), used};
}

// Scheduler options on the kernel command line: how the machine was told
// to place threads. Upstream Linux knows the ones in kUpstream; any other
// sched* option comes from a patched kernel.
std::string sched_boot_options() {
  static const char* const kUpstream[] = {"isolcpus", "nohz_full", "nohz", "relax_domain_level", "skew_tick",
                                          "sched_verbose", "sched_debug", "sched_thermal_decay_shift",
                                          "sched_proxy_exec"};
  std::ifstream f("/proc/cmdline");
  std::string word, out;
  while (f >> word) {
    if (word == "--") break;  // what follows is init's
    const std::string name = word.substr(0, word.find('='));
    const bool upstream = std::find(std::begin(kUpstream), std::end(kUpstream), name) != std::end(kUpstream);
    if (!upstream && name.rfind("sched", 0) != 0) continue;
    out += (out.empty() ? "" : " ") + word + (upstream ? "" : "(patched)");
  }
  return out.empty() ? "none" : out;
}

// ---- small facts ----------------------------------------------------------

double clock_gettime_ns() {
  timespec ts;
  const int64_t t0 = now_ns();
  for (int i = 0; i < kClockCalls; ++i) clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(now_ns() - t0) / kClockCalls;
}

// "shared": some cache level lists more than one CPU; "private": caches are
// described but none is shared; "none": no cache topology at all (typical of
// VMs), so the scheduler cannot tell near CPUs from far ones.
std::string cache_topology() {
  glob_t g{};
  if (glob("/sys/devices/system/cpu/cpu*/cache/index*/shared_cpu_list", 0, nullptr, &g) != 0) {
    globfree(&g);
    return "none";
  }
  bool shared = false;
  for (size_t i = 0; i < g.gl_pathc && !shared; ++i) {
    std::ifstream f(g.gl_pathv[i]);
    std::string list;
    std::getline(f, list);
    shared = list.find_first_of(",-") != std::string::npos;
  }
  globfree(&g);
  return shared ? "shared" : "private";
}

struct CpuTimes {
  unsigned long long total = 0, steal = 0;
};

CpuTimes read_cpu_times() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  CpuTimes t;
  f >> cpu;
  for (int field = 0; field < 10; ++field) {
    unsigned long long v = 0;
    if (!(f >> v)) break;
    if (field < 8) t.total += v;  // guest time is already inside user
    if (field == 7) t.steal = v;
  }
  return t;
}

double steal_pct(const CpuTimes& a, const CpuTimes& b) {
  const auto total = b.total - a.total;
  return total ? 100.0 * double(b.steal - a.steal) / double(total) : 0.0;
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string one;
  f >> one;
  return one.empty() ? "-" : one;
}

bool bpffs_mounted() {
  std::ifstream f("/proc/mounts");
  std::string dev, dir, type, rest;
  while (f >> dev >> dir >> type && std::getline(f, rest))
    if (type == "bpf") return true;
  return false;
}

bool bpf_syscall_allowed() {
  bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.map_type = BPF_MAP_TYPE_ARRAY;
  attr.key_size = 4;
  attr.value_size = 4;
  attr.max_entries = 1;
  const long fd = syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr);
  if (fd < 0) return false;
  close(static_cast<int>(fd));
  return true;
}

// "yes", or "no (why)".
std::string ebpf_status() {
  if (geteuid() != 0) return "no (not root)";
  if (!bpffs_mounted()) return "no (bpf filesystem not mounted)";
  if (!bpf_syscall_allowed()) return std::string("no (bpf() refused: ") + strerror(errno) + ")";
  return "yes";
}

std::string clocksource() {
  std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  f >> name;
  return name.empty() ? "-" : name;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::ostringstream s;
  for (size_t i = 0; i < cpus.size(); ++i) s << (i ? "," : "") << cpus[i];
  return s.str();
}

// ---- subcommands ------------------------------------------------------------

int cmd_c2c(int argc, char** argv) {
  std::vector<int> cpus = allowed_cpus();
  if (argc == 4) {
    const int a = atoi(argv[2]), b = atoi(argv[3]);
    auto allowed = [&](int c) { return std::find(cpus.begin(), cpus.end(), c) != cpus.end(); };
    if (!allowed(a) || !allowed(b)) {
      fprintf(stderr, "lockswap-probe: CPUs %d,%d are not both in this process's affinity (%s)\n", a, b,
              cpu_list(cpus).c_str());
      return 2;
    }
    cpus = {a, b};
  } else if (argc != 2) {
    fprintf(stderr, "usage: lockswap-probe c2c [CPU_A CPU_B]\n");
    return 2;
  }
  if (cpus.size() < 2 || cpus[0] == cpus[1]) {
    printf("c2c_ns=0 cpus=%d\n", cpus.empty() ? 0 : cpus[0]);
    return 0;
  }
  printf("c2c_ns=%ld cpus=%d,%d\n", c2c_ns(cpus[0], cpus[1]), cpus[0], cpus[1]);
  return 0;
}

int cmd_summary() {
  const std::string load = loadavg();
  const CpuTimes t0 = read_cpu_times();
  const std::vector<int> cpus = allowed_cpus();
  const long c2c = cpus.size() >= 2 ? c2c_ns(cpus[0], cpus[1]) : 0;
  usleep(100'000);  // a few clock ticks for the steal share
  printf("env: cpus=%zu topology=%s c2c_ns=%ld load=%s steal_pct=%.1f ebpf=%s\n", cpus.size(),
         cache_topology().c_str(), c2c, load.c_str(), steal_pct(t0, read_cpu_times()),
         ebpf_status() == "yes" ? "yes" : "no");
  return 0;
}

// The pairs measured by `facts`: all of them on small machines, on large
// ones CPU 0 against a spread of others plus a few neighbours.
std::vector<std::pair<int, int>> probe_pairs(const std::vector<int>& cpus) {
  std::vector<std::pair<int, int>> pairs;
  const size_t n = cpus.size();
  if (n <= size_t{kMaxPairsAll}) {
    for (size_t i = 0; i < n; ++i)
      for (size_t j = i + 1; j < n; ++j) pairs.emplace_back(cpus[i], cpus[j]);
    return pairs;
  }
  for (int k = 1; k <= kSampledPairs / 2; ++k) pairs.emplace_back(cpus[0], cpus[k * (n - 1) / (kSampledPairs / 2)]);
  for (size_t i = 1; pairs.size() < size_t{kSampledPairs} && i + 1 < n; i += n / 4) pairs.emplace_back(cpus[i], cpus[i + 1]);
  return pairs;
}

void print_c2c_samples(const std::vector<std::pair<int, int>>& pairs) {
  // Three passes a few hundred ms apart: a host that moves vCPUs shows as a
  // pair whose samples disagree.
  for (int pass = 0; pass < 3; ++pass) {
    if (pass) usleep(300'000);
    for (auto [a, b] : pairs) printf("c2c pair=%d,%d pass=%d ns=%ld\n", a, b, pass, c2c_ns(a, b));
  }
}

int cmd_facts() {
  const int64_t start = now_ns();
  const std::string load_before = loadavg();
  const CpuTimes t0 = read_cpu_times();
  const std::vector<int> cpus = allowed_cpus();
  printf("cpus_online=%ld\ncpus_allowed=%zu\ncpu_list=%s\n", sysconf(_SC_NPROCESSORS_ONLN), cpus.size(),
         cpu_list(cpus).c_str());
  printf("topology=%s\n", cache_topology().c_str());
  printf("clocksource=%s\nclock_gettime_ns=%.1f\n", clocksource().c_str(), clock_gettime_ns());
  if (cpus.size() >= 2) {
    print_c2c_samples(probe_pairs(cpus));
    const WakeResult w = *measure_wakes(cpus[0], {});
    printf("wake samples=%d lost=%d on_waker_pct=%.0f mean_us=%.1f max_us=%.1f\n", w.samples, w.lost,
           w.samples ? 100.0 * w.on_waker / w.samples : 0.0, w.mean_us, w.max_us);
    if (const auto busy = measure_wakes(cpus[0], {cpus[1], true})) {  // no line without both figures
      const WakeResult idle = *measure_wakes(cpus[0], {cpus[1], false});
      printf("wake_remote samples=%d idle_mean_us=%.1f busy_mean_us=%.1f\n", std::min(idle.samples, busy->samples),
             idle.mean_us, busy->mean_us);
    }
    const SpreadResult sp = spread(cpus.size());
    printf("spread runnable=%d cpus_used=%.2f\n", sp.runnable, sp.cpus_used);
  }
  printf("sched_boot_options=%s\n", sched_boot_options().c_str());
  const int64_t left = kMinStealWindowNs - (now_ns() - start);
  if (left > 0) usleep(static_cast<useconds_t>(left / 1000));
  printf("steal_pct=%.1f\n", steal_pct(t0, read_cpu_times()));
  printf("load_before=%s\nload_after=%s\n", load_before.c_str(), loadavg().c_str());
  printf("ebpf=%s\n", ebpf_status().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "c2c") return cmd_c2c(argc, argv);
  if (cmd == "summary" && argc == 2) return cmd_summary();
  if (cmd == "facts" && argc == 2) return cmd_facts();
  fprintf(stderr,
          "usage: lockswap-probe c2c [CPU_A CPU_B] | summary | facts\n"
          "  c2c      median core-to-core round trip: c2c_ns=N cpus=A,B\n"
          "  summary  one env: line for table headers\n"
          "  facts    everything `lockswap doctor` reads, key=value lines\n");
  return 2;
}
