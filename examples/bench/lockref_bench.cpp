// examples/bench/lockref_bench.cpp — the open/close analog for core/lockref.h.
//
// The kernel's lockref retry bound (893a7d32e8e0; docs/seeds.md §3) was
// measured with an open/close test:
// every open takes a reference on the same dentry (lockref get), every close
// drops it (dput: lockref put). Here N threads do exactly that on --objects K
// shared objects (K=1: one hot object; K=4: a few hot ones), each object a
// reference count on its own cache line that a "cache" holds one base
// reference of, so it never drops to zero:
//
//   loop: pick an object (round robin from a per-thread start, or random)
//         get a reference       pause --hold   drop it      pause --work
//
// The reference count is one of (--impl):
//   lockref   core/lockref.h used directly (linked from lockswap_core):
//             get = get_not_zero(); put = put_or_lock() (dput before 2023),
//             or with --put return the fast_dput shape: put_return(), and on
//             -1 lock(), count-1 under the lock, unlock(). --retries sets
//             g_lockref_tunables.retries (0 = unbounded, the pre-2019 loop).
//   atomic    std::atomic<int> fetch_add / fetch_sub: the floor (no lock half,
//             no loop; a single locked instruction on x86)
//   mutex     a std::mutex-protected int (lock, ++, unlock ... lock, --, unlock)
//   pthread   the same with a pthread_mutex_t directly
//
// Correctness is checked: at the end every count must be back to its base
// reference (1), otherwise "LOCKREF BROKEN" and exit 1.
//
// Output: one line "lockswap-lockref-bench key=value ...", with the lock
// events of the run (lockref_lockless, lockref_cas_fail, lockref_fallback,
// lockref_lock_sleep) from lockevent_total(); put_locked counts the
// put_return() == -1 fallbacks of --put return (put_return has no event of
// its own); fallback_per_kupdate = (fallback + put_locked) per 1000 updates,
// two updates (get + put) per op. lockref_sweep.py drives it.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/lock_events.h"
#include "core/lockref.h"
#include "core/thread_registry.h"

#include "examples/bench/bench_util.h"

namespace {

using bench::now_ns;
using bench::pause_n;

using lockswap::LockEvent;
using lockswap::Lockref;

enum class Impl { lockref, atomic, mutex, pthread };

struct Options {
  Impl impl = Impl::lockref;
  std::string impl_name = "lockref";
  int threads = 4;
  int objects = 1;
  bool random_pick = false;
  bool put_return = false;
  long retries = 100;
  int hold = 0;   // pause instructions while holding the reference
  int work = 0;   // pause instructions between ops
  double duration = 1.0;
  uint64_t seed = 1;
  std::string label;
};

constexpr const char* kUsage =
    "usage: %s [--impl lockref|atomic|mutex|pthread] [--threads N] [--objects K] [--pick rr|random]\n"
    "          [--retries R] [--put or_lock|return] [--hold P] [--work P] [--duration S] [--label S]\n"
    "  --impl      the reference count (default lockref)\n"
    "  --threads   threads taking and dropping references (default 4)\n"
    "  --objects   shared objects, each on its own cache line (default 1)\n"
    "  --pick      rr: thread i's n-th op uses object (i+n) %% K (default); random: per-thread PRNG\n"
    "  --retries   lockref: failed compare-and-swaps before the lock fallback (default 100; 0 = unbounded)\n"
    "  --put       lockref: put_or_lock (default) or put_return with a locked fallback (fast_dput)\n"
    "  --hold P    pause instructions while holding the reference (default 0)\n"
    "  --work P    pause instructions between ops (default 0)\n"
    "  --duration  seconds (default 1)\n";

Options parse(int argc, char** argv) {
  Options o;
  bench::Args args(argc, argv, "lockref_bench", kUsage);
  while (args.next()) {
    if (args.is("--impl")) {
      o.impl_name = args.value();
      if (o.impl_name == "lockref") o.impl = Impl::lockref;
      else if (o.impl_name == "atomic") o.impl = Impl::atomic;
      else if (o.impl_name == "mutex") o.impl = Impl::mutex;
      else if (o.impl_name == "pthread") o.impl = Impl::pthread;
      else args.fail("unknown --impl");
    } else if (args.is("--threads")) o.threads = static_cast<int>(args.integer());
    else if (args.is("--objects")) o.objects = static_cast<int>(args.integer());
    else if (args.is("--pick")) {
      std::string p = args.value();
      if (p == "rr") o.random_pick = false;
      else if (p == "random") o.random_pick = true;
      else args.fail("--pick must be rr or random");
    } else if (args.is("--put")) {
      std::string p = args.value();
      if (p == "or_lock") o.put_return = false;
      else if (p == "return") o.put_return = true;
      else args.fail("--put must be or_lock or return");
    } else if (args.is("--retries")) o.retries = args.integer();
    else if (args.is("--hold")) o.hold = static_cast<int>(args.integer());
    else if (args.is("--work")) o.work = static_cast<int>(args.integer());
    else if (args.is("--duration")) o.duration = args.number();
    else if (args.is("--seed")) o.seed = strtoull(args.value(), nullptr, 0);
    else if (args.is("--label")) o.label = args.value();
    else if (args.is_help()) args.help();
    else args.unknown();
  }
  if (o.threads < 1 || o.threads > 4096) args.fail("--threads must be 1..4096");
  if (o.objects < 1 || o.objects > 4096) args.fail("--objects must be 1..4096");
  if (o.retries < 0 || o.retries > 1000000) args.fail("--retries must be 0..1000000");
  if (o.hold < 0 || o.work < 0) args.fail("--hold/--work must be >= 0");
  if (!(o.duration > 0)) args.fail("--duration must be > 0");
  return o;
}

using bench::Rng;

// One shared object: every kind of count, on its own cache line(s). Only the
// one chosen by --impl is touched.
struct alignas(64) Object {
  Lockref lr;
  alignas(64) std::atomic<int> at{1};
  alignas(64) std::mutex mx;
  int mx_count = 1;
  alignas(64) pthread_mutex_t pm = PTHREAD_MUTEX_INITIALIZER;
  int pm_count = 1;
};

[[noreturn]] void broken(const char* what, long long got, long long want) {
  fprintf(stderr, "lockref_bench: LOCKREF BROKEN: %s (got %lld, expected %lld)\n", what, got, want);
  fflush(stderr);
  _exit(1);
}

bench::Race g_race;

struct alignas(64) ThreadStats {
  uint64_t ops = 0;
  uint64_t put_locked = 0;  // --put return: put_return() said -1, count-- done under the lock
};

template <Impl I, bool PutReturn>
void worker(const Options& o, Object* objs, int idx, ThreadStats& st) {
  Rng rng(o.seed * 0x100000001b3ull + static_cast<uint64_t>(idx) * 0x9e3779b97f4a7c15ull + 1);
  const unsigned k = static_cast<unsigned>(o.objects);
  unsigned rr = static_cast<unsigned>(idx) % k;
  uint64_t ops = 0, put_locked = 0;
  g_race.wait_start();
  while (!g_race.stopped()) {
    unsigned pick;
    if (o.random_pick) {
      pick = static_cast<unsigned>((rng.next() >> 32) % k);
    } else {
      pick = rr;
      if (++rr == k) rr = 0;
    }
    Object& ob = objs[pick];
    if constexpr (I == Impl::lockref) {
      if (!ob.lr.get_not_zero()) broken("get_not_zero failed on a live object", ob.lr.count(), 1);
      pause_n(o.hold);
      if constexpr (PutReturn) {
        if (ob.lr.put_return() < 0) {  // fast_dput: no lock-free path; count-- under the lock
          ++put_locked;
          ob.lr.lock();
          lockswap::lockref::set_count_locked(ob.lr.word(), ob.lr.count() - 1);
          ob.lr.unlock();
        }
      } else {
        if (!ob.lr.put_or_lock()) {
          int c = ob.lr.count();
          ob.lr.unlock();
          broken("put_or_lock found count <= 1 while we held a reference", c, 2);
        }
      }
    } else if constexpr (I == Impl::atomic) {
      ob.at.fetch_add(1, std::memory_order_acquire);
      pause_n(o.hold);
      ob.at.fetch_sub(1, std::memory_order_release);
    } else if constexpr (I == Impl::mutex) {
      ob.mx.lock();
      ++ob.mx_count;
      ob.mx.unlock();
      pause_n(o.hold);
      ob.mx.lock();
      --ob.mx_count;
      ob.mx.unlock();
    } else {
      pthread_mutex_lock(&ob.pm);
      ++ob.pm_count;
      pthread_mutex_unlock(&ob.pm);
      pause_n(o.hold);
      pthread_mutex_lock(&ob.pm);
      --ob.pm_count;
      pthread_mutex_unlock(&ob.pm);
    }
    ++ops;
    pause_n(o.work);
  }
  st.ops = ops;
  st.put_locked = put_locked;
  g_race.finished.fetch_add(1, std::memory_order_release);
}

using WorkerFn = void (*)(const Options&, Object*, int, ThreadStats&);

WorkerFn pick_worker(const Options& o) {
  switch (o.impl) {
    case Impl::lockref: return o.put_return ? worker<Impl::lockref, true> : worker<Impl::lockref, false>;
    case Impl::atomic: return worker<Impl::atomic, false>;
    case Impl::mutex: return worker<Impl::mutex, false>;
    case Impl::pthread: return worker<Impl::pthread, false>;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  lockswap::g_lockref_tunables.retries = static_cast<uint32_t>(o.retries);

  std::vector<Object> objs(static_cast<size_t>(o.objects));
  for (auto& ob : objs) ob.lr.init(1);  // the cache's base reference

  // Events of this process before the run (none expected): subtracted below.
  const LockEvent evs[] = {LockEvent::lockref_lockless, LockEvent::lockref_cas_fail, LockEvent::lockref_fallback,
                           LockEvent::lockref_lock_sleep};
  uint64_t ev0[4];
  for (int i = 0; i < 4; ++i) ev0[i] = lockswap::lockevent_total(evs[i]);

  std::vector<ThreadStats> stats(static_cast<size_t>(o.threads));
  std::vector<std::thread> threads;
  WorkerFn fn = pick_worker(o);
  for (int i = 0; i < o.threads; ++i)
    threads.emplace_back(fn, std::cref(o), objs.data(), i, std::ref(stats[static_cast<size_t>(i)]));
  usleep(10000);  // every thread at the start line

  const uint64_t elapsed_ns = g_race.run_for(o.duration);
  // Watchdog: every thread finishes its current op within moments of the stop
  // flag unless the lock lost a wake-up (or the machine is absurdly loaded).
  g_race.await_finished(o.threads, o.duration, "lockref_bench", "lost wake-up or deadlock in the lock");
  for (auto& t : threads) t.join();

  for (size_t i = 0; i < objs.size(); ++i) {
    const Object& ob = objs[i];
    long long c = o.impl == Impl::lockref ? ob.lr.count()
                  : o.impl == Impl::atomic ? ob.at.load()
                  : o.impl == Impl::mutex  ? ob.mx_count
                                           : ob.pm_count;
    if (c != 1) broken("count not back to the base reference (lost or duplicated update)", c, 1);
    if (o.impl == Impl::lockref && const_cast<Object&>(ob).lr.is_locked())
      broken("lock half still held at the end", 1, 0);
  }

  uint64_t ev[4];
  for (int i = 0; i < 4; ++i) ev[i] = lockswap::lockevent_total(evs[i]) - ev0[i];

  bench::OpsSpread spread;
  uint64_t put_locked = 0;
  for (const auto& s : stats) {
    spread.add(s.ops);
    put_locked += s.put_locked;
  }
  const uint64_t total = spread.total;
  const double secs = static_cast<double>(elapsed_ns) / 1e9;
  // Per op there are two lockref updates (get + put).
  const double updates = 2.0 * static_cast<double>(total);
  printf(
      "lockswap-lockref-bench label=%s impl=%s threads=%d objects=%d pick=%s put=%s retries=%ld hold=%d work=%d "
      "duration_s=%.3f ops=%llu kops=%.1f min_ops=%llu mean_ops=%.1f max_ops=%llu fairness=%.3f cpus=%.2f "
      "lockless=%llu cas_fail=%llu fallback=%llu lock_sleep=%llu cas_fail_per_update=%.4f "
      "fallback_per_kupdate=%.3f put_locked=%llu events=%d\n",
      o.label.empty() ? "-" : o.label.c_str(), o.impl_name.c_str(), o.threads, o.objects,
      o.random_pick ? "random" : "rr", o.put_return ? "return" : "or_lock", o.retries, o.hold, o.work, secs,
      static_cast<unsigned long long>(total), static_cast<double>(total) / secs / 1000.0,
      static_cast<unsigned long long>(spread.min), spread.mean(), static_cast<unsigned long long>(spread.max),
      spread.fairness(), g_race.cpus_used(elapsed_ns), static_cast<unsigned long long>(ev[0]),
      static_cast<unsigned long long>(ev[1]), static_cast<unsigned long long>(ev[2]),
      static_cast<unsigned long long>(ev[3]), updates > 0 ? static_cast<double>(ev[1]) / updates : 0.0,
      updates > 0 ? 1000.0 * static_cast<double>(ev[2] + put_locked) / updates : 0.0,
      static_cast<unsigned long long>(put_locked), LOCKSWAP_LOCK_EVENTS ? 1 : 0);
  return 0;
}
