// core/percid/thread.cpp — the reader-slot arena (design: core/percid/thread.h).
#include "core/percid/thread.h"

#include <sys/mman.h>

#include <cstddef>

#include "core/spin_guard.h"

namespace lockswap {
namespace percid {

Geometry g_geometry;

namespace {

// Everything below is guarded by g_lock (slow paths only: first use and
// destroy of a lock).
std::atomic<uint32_t> g_lock{0};
bool g_map_failed = false;
uint32_t g_handed_out = 0;         // blocks 1..g_handed_out have been used at least once
uint32_t g_free_head = kNoBlock;   // a destroyed lock's block, linked through g_free_next
uint32_t g_free_next[kMaxLocks];
const void* g_owner[kMaxLocks];    // the lock using each block; nullptr = on the free list

uint32_t slots_for_this_machine() {
  uint32_t want = 2 * cid::possible_cpus();
  uint32_t slots = kMinSlotsPerLock;
  while (slots < want && slots < kMaxSlotsPerLock) slots *= 2;
  return slots;
}

bool map_arena() {
  if (g_geometry.base != nullptr) return true;
  if (g_map_failed) return false;
  uint32_t slots = slots_for_this_machine();
  std::size_t bytes = std::size_t{kMaxLocks} * slots * sizeof(ReaderSlot);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    g_map_failed = true;
    return false;
  }
  g_geometry = {static_cast<ReaderSlot*>(p), static_cast<uint32_t>(__builtin_ctz(slots)), slots - 1};
  return true;
}

// A block still owned by a lock at this very address: that lock was
// re-initialised or its memory reused without destroy, so it is dead.
uint32_t block_of_dead_lock_at(const void* lock) {
  for (uint32_t i = 0; i < g_handed_out; ++i)
    if (g_owner[i] == lock) return i + 1;
  return kNoBlock;
}

uint32_t take_block(const void* lock) {
  if (uint32_t b = block_of_dead_lock_at(lock)) return b;
  if (uint32_t b = g_free_head) {
    g_free_head = g_free_next[b - 1];
    return b;
  }
  if (g_handed_out < kMaxLocks) return ++g_handed_out;
  return kPlainRwsem;
}

void zero_block(uint32_t index) { clear_slots(block_of(index), g_geometry.slot_mask + 1); }

}  // namespace

// The slot count is read once: after each atomic load the compiler would
// read the global again.
uint64_t readers(uint32_t index) { return sum_slots(block_of(index), g_geometry.slot_mask + 1); }

void set_drain(uint32_t index, uint32_t value) { set_drain_slots(block_of(index), g_geometry.slot_mask + 1, value); }

uint32_t assign_block(std::atomic<uint32_t>& index_word, const void* lock) {
  uint32_t index;
  {
    SpinGuard g(g_lock);
    index = index_word.load(arch::mo_hint);
    if (index != kNoBlock) return index;  // another thread got here first
    index = map_arena() ? take_block(lock) : kPlainRwsem;
    if (has_block(index)) {
      g_owner[index - 1] = lock;
      zero_block(index);
    }
    index_word.store(index, arch::mo_unlock);  // publishes the geometry and the zeroed block
  }
  if (index == kPlainRwsem) lockevent_inc(LockEvent::percid_plain);
  return index;
}

void release_block(std::atomic<uint32_t>& index_word, const void* lock) {
  SpinGuard g(g_lock);
  uint32_t index = index_word.load(arch::mo_hint);
  if (has_block(index) && g_owner[index - 1] == lock) {  // not a copy of another lock's object
    g_owner[index - 1] = nullptr;
    g_free_next[index - 1] = g_free_head;
    g_free_head = index;
  }
  index_word.store(kNoBlock, arch::mo_hint);
}

uint32_t slots_per_lock() { return g_geometry.base ? g_geometry.slot_mask + 1 : slots_for_this_machine(); }

uint32_t blocks_in_use() {
  SpinGuard g(g_lock);
  uint32_t n = 0;
  for (uint32_t i = 0; i < g_handed_out; ++i) n += g_owner[i] != nullptr;
  return n;
}

void after_fork_in_child() { g_lock.store(0, arch::mo_hint); }  // a thread that did not survive may have held it

}  // namespace percid
}  // namespace lockswap
