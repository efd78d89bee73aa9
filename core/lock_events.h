// core/lock_events.h — per-thread lock event counters (see lock_events_list.h).
//
// Each thread increments its own counters, which live in its registry slot
// (core/thread_registry.h): no shared cache line is written on any path, and
// because slots are type-stable and recycled, summing every slot ever mapped
// gives process totals that include threads that have already exited.
// Built with LOCKSWAP_LOCK_EVENTS=0 every lockevent_* call compiles to nothing.
#pragma once
#include <cstdint>

#ifndef LOCKSWAP_LOCK_EVENTS
#define LOCKSWAP_LOCK_EVENTS 1
#endif

namespace lockswap {

enum class LockEvent : uint32_t {
#define LOCK_EVENT(name, meaning) name,
#include "core/lock_events_list.h"
#undef LOCK_EVENT
  count_
};
inline constexpr uint32_t kNumLockEvents = static_cast<uint32_t>(LockEvent::count_);

inline constexpr const char* kLockEventNames[] = {
#define LOCK_EVENT(name, meaning) #name,
#include "core/lock_events_list.h"
#undef LOCK_EVENT
};
inline constexpr const char* kLockEventMeanings[] = {
#define LOCK_EVENT(name, meaning) meaning,
#include "core/lock_events_list.h"
#undef LOCK_EVENT
};

}  // namespace lockswap
