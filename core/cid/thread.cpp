// core/cid/thread.cpp — LOCKSWAP_CID=thread, the per-task mode: a
// thread's id is its registry slot's (core/thread_registry.h), for life
// (design: core/cid.h, "thread"). The same id is what every other allocator
// lends a thread that cannot have one of its own (borrowed_id).
#include "core/cid.h"
#include "core/cid/internal.h"

namespace lockswap {
namespace cid {

uint32_t thread_first_use() {
  ThreadSlot& s = self_slot();
  lockevent_inc(LockEvent::cid_alloc);
  return (s.id - 1) & (kMaxCids - 1);
}

uint32_t borrowed_id() {
  lockevent_inc(LockEvent::cid_fallback);
  return (self_slot().id - 1) & (kMaxCids - 1);
}

}  // namespace cid
}  // namespace lockswap
