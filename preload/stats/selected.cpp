// preload/stats/selected.cpp — see stats_selected.h.
#include "preload/stats/selected.h"

#include <atomic>

namespace lockswap::stats {


namespace {

struct SelectedLock {
  std::atomic<uintptr_t> addr;  // claimed once, never freed (destroy + init finds it again)
  std::atomic<bool> used;       // its fields are written
  std::atomic<Family> family;
  std::atomic<uint8_t> variant;
  std::atomic<int8_t> rule;
  std::atomic<uint64_t> events[kNumLockEvents];
};
SelectedLock g_selected[kMaxSelectedLocks];
std::atomic<uint64_t> g_unattributed[select::kMaxRules];  // selected locks that found no entry

// Entries are claimed in order and never given back: a search stops at the
// first unclaimed one.
SelectedLock* find_selected(uintptr_t addr, bool claim) {
  for (SelectedLock& e : g_selected) {
    uintptr_t at = e.addr.load(std::memory_order_acquire);
    if (at == 0 && claim && e.addr.compare_exchange_strong(at, addr, std::memory_order_acq_rel)) return &e;
    if (at == addr) return &e;
    if (at == 0) return nullptr;
  }
  return nullptr;
}

}  // namespace

bool note_selected(Family f, const void* object, uint8_t variant, int rule) {
  if (rule < 0 || rule >= select::rule_count()) return false;
  SelectedLock* e = find_selected(reinterpret_cast<uintptr_t>(object), true);
  if (e == nullptr) {
    g_unattributed[rule].fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  e->family.store(f, std::memory_order_relaxed);
  e->variant.store(variant, std::memory_order_relaxed);
  e->rule.store(static_cast<int8_t>(rule), std::memory_order_relaxed);
  e->used.store(true, std::memory_order_release);
  return true;
}

void hand_over_events(const void* object, ThreadSlot& slot) {
  SelectedLock* e = object != nullptr ? find_selected(reinterpret_cast<uintptr_t>(object), false) : nullptr;
  for (uint32_t i = 0; i < kNumLockEvents; ++i) {
    uint64_t n = slot.apart[i].load(std::memory_order_relaxed);
    if (n == 0) continue;
    slot.apart[i].store(0, std::memory_order_relaxed);
    if (e != nullptr) e->events[i].fetch_add(n, std::memory_order_relaxed);
  }
  slot.apart_pending = false;
}

bool selected_entry(int index, SelectedLockView& out) {
  const SelectedLock& e = g_selected[index];
  if (!e.used.load(std::memory_order_acquire)) return false;
  out.addr = e.addr.load(std::memory_order_relaxed);
  out.family = e.family.load(std::memory_order_relaxed);
  out.variant = e.variant.load(std::memory_order_relaxed);
  out.rule = e.rule.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < kNumLockEvents; ++i) out.events[i] = e.events[i].load(std::memory_order_relaxed);
  return true;
}

uint64_t unattributed_locks(int rule) {
  return rule >= 0 && rule < select::kMaxRules ? g_unattributed[rule].load(std::memory_order_relaxed) : 0;
}

void clear_selected_events() {
  for (SelectedLock& e : g_selected)
    for (auto& c : e.events) c.store(0, std::memory_order_relaxed);
}

}  // namespace lockswap::stats
