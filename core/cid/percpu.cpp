// core/cid/percpu.cpp — LOCKSWAP_CID=percpu, v6.4's allocator: an id
// cached per CPU, a private bitmap, and a periodic scan that frees idle ids
// and compacts toward 0 (design: core/cid.h, "percpu" and "Memory order").
// The fast path, percpu_current(), is inline in core/cid.h.
#include "arch/clock.h"
#include "arch/relax.h"
#include "core/cancel.h"
#include "core/cid.h"
#include "core/cid/internal.h"
#include "core/spin_guard.h"

namespace lockswap {
namespace cid {

CpuCache g_cpu_cache[kMaxCpus];
std::atomic<uint32_t> g_epoch{0};

namespace {

uint64_t now_ns() { return arch::monotonic_ns(); }

void count_if_contended(const SpinGuard& g) {
  if (g.contended()) lockevent_inc(LockEvent::cid_lock_contended);
}

// The per-process bitmap and its forward-progress lock (docs/kernel-algorithms.md §4.3: cid_lock and
// use_cid_lock), plus the scan clock.
struct PrivateIds {
  Bitmap bits;
  alignas(64) std::atomic<uint32_t> lock;
  std::atomic<uint32_t> use_lock;          // allocations serialise on `lock` while set
  std::atomic<uint64_t> next_scan_ns;
};
PrivateIds g_private;

enum class Got : uint8_t { id, raced, full };

// One lock-free attempt at the lowest free id (mm_cid_try_get()).
Got try_get(uint32_t& id) {
  id = first_zero(g_private.bits);
  if (id >= kMaxCids) return Got::full;
  uint64_t bit = bit_of(id);
  return (g_private.bits[id / 64].fetch_or(bit, arch::mo_handover) & bit) ? Got::raced : Got::id;
}

// __mm_cid_get(): lock-free first; after a lost race, newcomers queue on the
// lock and the holder retries until it wins. kMaxCids when the space is full.
uint32_t alloc_lowest() {
  uint32_t id;
  if (g_private.use_lock.load(arch::mo_hint) == 0) {
    Got got = try_get(id);
    if (got != Got::raced) return got == Got::id ? id : kMaxCids;
  }
  ThreadInLock entry;
  if (entry.reentered()) return kMaxCids;  // a signal handler: its caller borrows
  SpinGuard g(g_private.lock);
  count_if_contended(g);
  g_private.use_lock.store(1, arch::mo_hint);
  Got got;
  while ((got = try_get(id)) == Got::raced) arch::cpu_relax();
  g_private.use_lock.store(0, arch::mo_hint);
  return got == Got::id ? id : kMaxCids;
}

void free_private(uint32_t id) { g_private.bits[id / 64].fetch_and(~bit_of(id), arch::mo_handover); }

// A user met the lazy-put flag: it frees the id (if its CAS wins) and will
// take the lowest free one.
void drop_lazy(CpuCache& c, uint32_t lazy) {
  if (!c.cid.compare_exchange_strong(lazy, kUnset, arch::mo_dekker)) return;
  free_private(lazy & ~kLazyPut);
  lockevent_inc(LockEvent::cid_reclaim);
}

bool used_recently(const CpuCache& c, uint32_t epoch) { return epoch - c.epoch.load(arch::mo_dekker) < 2; }

// sched_mm_cid_remote_clear(): valid -> lazy, then back off if the slot was
// used recently (its user resolves the flag), else lazy -> unset and free.
void remote_clear(CpuCache& c, uint32_t epoch) {
  uint32_t v = c.cid.load(arch::mo_dekker);
  if (!is_valid(v) || !c.cid.compare_exchange_strong(v, v | kLazyPut, arch::mo_dekker)) return;
  if (used_recently(c, epoch)) return;
  uint32_t lazy = v | kLazyPut;
  if (!c.cid.compare_exchange_strong(lazy, kUnset, arch::mo_dekker)) return;
  free_private(v);
  lockevent_inc(LockEvent::cid_reclaim);
}

}  // namespace

void reset_percpu() {
  for (uint32_t cpu = 0; cpu < g_ncpus; ++cpu) {
    g_cpu_cache[cpu].cid.store(kUnset, arch::mo_hint);
    g_cpu_cache[cpu].epoch.store(0, arch::mo_hint);
  }
  for (auto& w : g_private.bits) w.store(0, arch::mo_hint);
  g_private.lock.store(0, arch::mo_hint);  // a thread that did not survive fork may have held it
  g_private.use_lock.store(0, arch::mo_hint);
  g_private.next_scan_ns.store(0, arch::mo_hint);
  g_epoch.store(0, arch::mo_hint);
}

uint32_t percpu_ids_in_use() { return popcount(g_private.bits); }

uint32_t percpu_stamp(CpuCache& c, uint32_t epoch) {
  c.epoch.store(epoch, arch::mo_dekker);  // before reading the id: see the header
  return c.cid.load(arch::mo_dekker);
}

namespace {
__attribute__((noinline)) uint32_t percpu_refill_body(uint32_t cpu) {
  SlowPathTimer timer;
  CpuCache& c = g_cpu_cache[cpu];
  c.epoch.store(g_epoch.load(arch::mo_hint), arch::mo_dekker);
  for (;;) {
    uint32_t v = c.cid.load(arch::mo_dekker);
    if (is_valid(v)) return v;
    if (is_lazy_put(v)) {
      drop_lazy(c, v);
      continue;
    }
    uint32_t id = alloc_lowest();
    if (id >= kMaxCids) return borrowed_id();
    lockevent_inc(LockEvent::cid_alloc);
    uint32_t expected = kUnset;
    if (c.cid.compare_exchange_strong(expected, id, arch::mo_dekker)) return id;
    free_private(id);  // another thread on this CPU filled the slot first
  }
}

__attribute__((noinline)) void percpu_clock_check_body() {
  uint64_t now = now_ns();
  uint64_t next = g_private.next_scan_ns.load(arch::mo_hint);
  if (now < next) return;
  // One scanner per period (the kernel's cmpxchg on mm_cid_next_scan).
  if (!g_private.next_scan_ns.compare_exchange_strong(next, now + kScanPeriodNs, arch::mo_hint)) return;
  SlowPathTimer timer;
  percpu_scan();
}
}  // namespace

// (For the asynchronous type, see global_take.)
uint32_t percpu_refill(uint32_t cpu) {
  if (cancel::async_caller()) return borrowed_id();
  return percpu_refill_body(cpu);
}

void percpu_clock_check() {
  if (cancel::async_caller()) return;
  percpu_clock_check_body();
}

// task_mm_cid_work(): a new epoch, then free the ids of slots idle for a
// whole epoch, then push ids >= the number in use back toward 0.
void percpu_scan() {
  uint32_t epoch = g_epoch.fetch_add(1, arch::mo_dekker) + 1;
  for (uint32_t cpu = 0; cpu < g_ncpus; ++cpu) {
    CpuCache& c = g_cpu_cache[cpu];
    if (!used_recently(c, epoch)) remote_clear(c, epoch);
  }
  uint32_t weight = popcount(g_private.bits);
  for (uint32_t cpu = 0; cpu < g_ncpus; ++cpu) {
    CpuCache& c = g_cpu_cache[cpu];
    uint32_t v = c.cid.load(arch::mo_hint);
    if (is_valid(v) && v >= weight) remote_clear(c, epoch);
  }
}

}  // namespace cid
}  // namespace lockswap
