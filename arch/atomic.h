// arch/atomic.h — memory orders and fences named by intent.
//
// Lock code in core/ never spells std::memory_order_* directly: it says what an
// access is for. That keeps the memory-order argument of each algorithm readable
// and lets a port tighten one intent without touching the algorithms.
#pragma once
#include <atomic>
#include <cstdint>

namespace lockswap::arch {

// Taking a lock: later accesses may not move above it.
inline constexpr std::memory_order mo_lock = std::memory_order_acquire;
// Releasing a lock: earlier accesses may not move below it.
inline constexpr std::memory_order mo_unlock = std::memory_order_release;
// Read-modify-write that both publishes and observes (queue links, grants).
inline constexpr std::memory_order mo_handover = std::memory_order_acq_rel;
// Hints, statistics and values re-validated by a later ordered access.
inline constexpr std::memory_order mo_hint = std::memory_order_relaxed;
// Dekker-style pairs (store my flag, then read yours) need a total order.
inline constexpr std::memory_order mo_dekker = std::memory_order_seq_cst;

// Full fence for the store-then-load pairs above.
inline void fence_dekker() { std::atomic_thread_fence(std::memory_order_seq_cst); }
// Acquire fence after a control dependency on a relaxed load (kernel's
// smp_acquire__after_ctrl_dep).
inline void fence_after_ctrl_dep() { std::atomic_thread_fence(std::memory_order_acquire); }

}  // namespace lockswap::arch
