// preload/stats/selected.h — the lock events of the locks LOCKSWAP_SELECT
// chose, counted apart per lock (statistics; the rules themselves are
// preload/config/select.h's, the per-lock tables preload/pthread/mixed.cpp's).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/lock_events.h"
#include "core/thread_registry.h"
#include "preload/config/select.h"

namespace lockswap::stats {

using select::Family;

// A lock a rule chose counts the lock events of its own calls apart
// (core/lock_events_list.h): the dispatcher tags it kTagSelected (abi.h) and
// runs its calls with the thread slot's kEventsApart bit set, so that
// lockevent_add also counts into the slot's `apart` bank
// (core/thread_registry.h), which hand_over_events() then adds to the lock's
// entry. The entries live in a fixed table of kMaxSelectedLocks, one per
// object address (nothing allocated); a selected lock that finds no entry
// free keeps its variant and counts its events with the process only.
inline constexpr int kMaxSelectedLocks = 64;

// Called once per selected object, where its tag is decided: false when
// its events cannot be counted apart (no entry left).
bool note_selected(Family f, const void* object, uint8_t variant, int rule);
// Adds the slot's `apart` counts to `object`'s entry and clears them.
void hand_over_events(const void* object, ThreadSlot& slot);

struct SelectedLockView {
  uintptr_t addr;
  Family family;
  uint8_t variant;
  int rule;
  uint64_t events[kNumLockEvents];
};
// Entry `index` (0 .. kMaxSelectedLocks-1) as relaxed snapshots, false when
// unused. Async-signal-safe: the statistics dump runs in a signal handler.
bool selected_entry(int index, SelectedLockView& out);
// How many locks `rule` chose that found no entry of their own.
uint64_t unattributed_locks(int rule);

// After fork, in the child: statistics are per process.
void clear_selected_events();

}  // namespace lockswap::stats
