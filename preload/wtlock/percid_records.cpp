// preload/wtlock/percid_records.cpp — the record table of LOCKSWAP_WTLOCK=percid
// (design: preload/wtlock/variants_percid.h). Everything here runs under the
// table lock, on the slow paths only (init, destroy, a lock's first use).
#include "core/spin_guard.h"
#include "preload/wtlock/variants_percid.h"

namespace lockswap::wtlock::percid_records {

PercidRecord g_table[kRecords];

namespace {

std::atomic<uint32_t> g_lock{0};
uint32_t g_handed_out = 0;      // records 1..g_handed_out have been used at least once
uint16_t g_free_head = 0;       // a destroyed lock's record, linked through g_free_next
uint16_t g_free_next[kRecords];
bool is_record(uint16_t n) { return n != 0 && n <= kRecords; }
bool owned_by(uint16_t n, const void* lock) { return is_record(n) && g_table[n - 1].lock == lock; }

uint16_t new_record() {
  if (uint16_t n = g_free_head) {
    g_free_head = g_free_next[n - 1];
    return n;
  }
  if (g_handed_out < kRecords) return static_cast<uint16_t>(++g_handed_out);
  return kNoRecord;
}

// A free lock: the rwsem's words zero (core/rwsem.h), no block yet, no writer.
void clear(PercidRecord& r, const void* lock) {
  r.count.store(0, std::memory_order_relaxed);
  r.owner.store(0, std::memory_order_relaxed);
  r.waitq.store(0, std::memory_order_relaxed);
  r.osq.store(0, std::memory_order_relaxed);
  r.index.store(percid::kNoBlock, std::memory_order_relaxed);
  r.state.store(0, std::memory_order_relaxed);
  r.lock = lock;
}

}  // namespace

uint16_t take(WtPercidWords& w, const void* lock, bool at_init) {
  SpinGuard g(g_lock);
  uint16_t n = w.record.load(std::memory_order_relaxed);
  if (!at_init && (is_record(n) || n == kNoRecord)) return n;  // another thread got here first
  if (at_init && owned_by(n, lock)) {
    PercidRecord& r = g_table[n - 1];
    if (r.index.load(std::memory_order_relaxed) != percid::kNoBlock) percid::release_block(r.index, &r);
  } else {
    n = new_record();
  }
  if (n != kNoRecord) clear(g_table[n - 1], lock);
  w.record.store(n, std::memory_order_release);  // publishes the cleared record
  return n;
}

bool release(WtPercidWords& w, const void* lock) {
  SpinGuard g(g_lock);
  uint16_t n = w.record.load(std::memory_order_relaxed);
  // Only a record this lock owns is touched: a number in the padding of a
  // lock never initialised may name another, live lock's record (memory that
  // held a copy of it), whose block and words are that lock's.
  if (owned_by(n, lock)) {
    PercidRecord& r = g_table[n - 1];
    if (!WtlockPercid::Lock::idle(r)) return false;  // busy: the lock keeps working (the record stays its)
    WtlockPercid::Lock::destroy(r);                  // its reader-slot block back to core/percid/thread.h's list
    r.lock = nullptr;
    g_free_next[n - 1] = g_free_head;
    g_free_head = n;
  }
  w.record.store(0, std::memory_order_relaxed);
  return true;
}

// A thread that did not survive the fork may have held the table lock.
void after_fork_in_child() { g_lock.store(0, std::memory_order_relaxed); }

}  // namespace lockswap::wtlock::percid_records
