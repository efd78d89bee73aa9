// core/rwsem/parking.h — the sleep-token protocol, the wake queue and a queued writer's sleep.
//
// Part of core/rwsem/thread_host.cpp's one translation unit: everything here
// has internal linkage, so include it nowhere else (but core/rwsem/
// thread_rep.h, which tests/core/rwsem_agreement_test.cpp includes too).
//
// How a queued waiter sleeps and how a waker wakes it at most once per
// sleep (the sleep token), why an awake queued writer is not woken at all,
// and the rules by which a queued writer leaves a free lock to the thread
// that released it (politeness) or bounds its sleep by its handoff deadline.
// Design and reasons: docs/rwsem.md.
#pragma once
#include <cerrno>
#include <cstdint>
#include <ctime>

#include "arch/clock.h"
#include "arch/futex.h"
#include "core/read_pref.h"
#include "core/rwsem/wait_list.h"
#include "core/wait_ctx.h"

namespace lockswap {
namespace rwsem_detail {
namespace {

using namespace rwsem;

// Parking. A waiter reads its park word, re-checks its condition, then sleeps
// while the word is unchanged; a waker changes the condition, then bumps the
// word. Unlike unpark(), a sleeper is sent at most one futex_wake per sleep:
// a queued writer is re-woken by every unlock that sees WAITERS, also while
// it is already runnable, and in userspace each of those would be a syscall.
//
// While asleep the waiter publishes in `blocked` which park value it sleeps
// on (sleep_token(seen)). Only the bump that moves park away from exactly that
// value owes it a wake; that waker claims it by resetting `blocked` to 0.
// Bumps made before the waiter read `seen` must not claim anything: the
// waiter's own re-check already saw their change, and letting them clear
// `blocked` would leave the real sleep without a waker (found as a hang: all
// writers asleep on a free lock with HANDOFF set).
// Dekker pair: the sleeper stores its token, then futex_wait reads park (the
// syscall orders them); the waker bumps park, then reads `blocked`. Either
// the waker sees the token and wakes, or futex_wait sees the new value.
constexpr uint32_t kSleepingOn = 1u << 31;
constexpr uint32_t sleep_token(uint32_t park_value) { return park_value | kSleepingOn; }
static_assert(sleep_token(0) != 0, "a sleeping thread never reads as not blocked");

// Returns 0 or ETIMEDOUT. The sleep is the one place an asynchronous
// cancellation may land (WaitCtx::sleep, core/cancel.h). While asleep a
// thread holding read locks counts as a sleeping read holder (reader
// preference rule (a), core/read_pref.h).
// The shared slot (core/thread_registry.h) may have several sleepers: its
// `blocked` is never set (one token cannot name them all), and every wake is
// a wake-all. Its sleepers read park before re-checking, so the bump after the
// condition changed is seen either by that read or by futex_wait.
//
// `writer` (queued writers): after publishing the token the sleeper looks
// at the count once more and does not sleep if the lock is free. That makes
// wakeups of a writer optional while it is awake (wake_writer()). A queued
// writer also passes its Waiter's flags, whose kWokenMark says that the
// count's WOKEN bit was set for it (mark_wake()) since it last cleared it:
// unlocks then release without waking anyone, so it must not sleep on an old
// `seen`. Threads of the shared slot publish no token but make the same two
// checks: a release they miss here bumps their park word after `seen`.

// The lock went free between a queued writer's failed attempt and its sleep.
// Not in the kernel (whose woken writer tries again at once): a blocking
// waiter sleeps up to polite_ns first, so that the thread that just released
// the lock, whose cache holds it and the data it guards, can take it again;
// that thread's next unlock wakes us (our token is published). Timed waiters
// retry at once.
// Sleeps on the park word (while it reads `seen`) for at most polite_ns (the
// lock's: polite_ns_of()): 0, or ETIMEDOUT.
// `family`: whose wait this is (the wait events; a caller without the
// acquisition's WaitCtx files it as lockswap's own).
int sleep_polite_ns(ThreadSlot& me, uint32_t seen, uint64_t polite_ns, WaitFamily family = WaitFamily::internal) {
  timespec end = arch::timespec_at(now_ns() + polite_ns);
  return WaitCtx::until(CLOCK_MONOTONIC, &end, family).sleep(&me.park, seen);
}

int polite_sleep(ThreadSlot& me, uint32_t seen, const WaitCtx& ctx, uint64_t polite_ns) {
  if (ctx.mode == WaitCtx::Mode::forever && polite_ns != 0) {
    int rc = sleep_polite_ns(me, seen, polite_ns, ctx.family);
    lockevent_inc(rc == ETIMEDOUT ? LockEvent::rwsem_polite_timeout : LockEvent::rwsem_polite_woken);
  }
  me.blocked.store(0, arch::mo_hint);
  return 0;
}

// What a queued writer's park_sleep() re-checks after publishing its token
// (see above), and how long it leaves a free lock to the releaser.
struct WriterRecheck {
  const std::atomic<uint64_t>& count;
  const std::atomic<uint8_t>& writer_flags;
  uint64_t polite_ns;
};

// park_sleep(): see above polite_sleep().
int park_sleep(ThreadSlot& me, uint32_t seen, const WaitCtx& ctx, const WriterRecheck* writer = nullptr) {
  read_pref::ReadHolderSleep holder_asleep;
  const bool shared = is_shared(me);
  if (!shared) me.blocked.store(sleep_token(seen), arch::mo_dekker);  // also tells spinners we are not running
  if (writer != nullptr) {
    bool marked = (writer->writer_flags.load(arch::mo_dekker) & Waiter::kWokenMark) != 0;
    if (marked || !(writer->count.load(arch::mo_dekker) & kLockMask)) {
      if (!marked && !shared) return polite_sleep(me, seen, ctx, writer->polite_ns);
      if (!shared) me.blocked.store(0, arch::mo_hint);
      return 0;
    }
  }
  int rc = ctx.sleep(&me.park, seen);
  if (!shared) me.blocked.store(0, arch::mo_hint);
  return rc;
}

void wake_parked(ThreadSlot& s) {
  if (__builtin_expect(is_shared(s), 0)) return unpark(s);
  uint32_t before = s.park.fetch_add(1, arch::mo_dekker);
  uint32_t owed = sleep_token(before);
  if (s.blocked.load(arch::mo_dekker) == owed && s.blocked.compare_exchange_strong(owed, 0, arch::mo_dekker))
    arch::futex_wake(&s.park, 1);
}

// Not in the kernel: a queued writer that is awake (no sleep token) is not
// sent a wakeup. It re-checks the lock after publishing its token
// (park_sleep()'s `writer` re-check), so this is a Dekker pair, all four accesses
// seq_cst: the waker's count change (the slow unlocks' release RMW, or the
// WOKEN fetch_or of mark_wake()), then its read of `blocked`; the sleeper's
// token store, then its read of the count — one of the two sees the other.
// The kernel's wake_up_process() of a running task is nearly free; here every
// unlock that finds WAITERS would bump the park word, and a writer that read
// the word before its attempt then never sleeps at all: it spins through the
// wait_lock against the owner (docs/rwsem.md, "One contended lock").
// Slots shared by several threads are always woken.
void wake_writer(ThreadSlot& s) {
  if (!is_shared(s)) {
    if (s.blocked.load(arch::mo_dekker) == 0) {
      lockevent_inc(LockEvent::rwsem_wake_awake);
      return;
    }
  }
  wake_parked(s);
}

// Threads to wake once the wait_lock is dropped (the kernel's wake_q). One
// mark_wake() adds one writer or at most kMaxReadersWakeup readers.
struct WakeQ {
  ThreadSlot* slots[kMaxReadersWakeup];
  uint32_t n = 0;
  bool writer = false;  // slots[0] is a queued writer (wake_writer())
  void add(ThreadSlot* s) { slots[n++] = s; }
  void add_writer(ThreadSlot* s) {
    writer = n == 0;
    add(s);
  }
  bool empty() const { return n == 0; }
  void wake() {
    for (uint32_t i = 0; i < n; ++i) (i == 0 && writer) ? wake_writer(*slots[i]) : wake_parked(*slots[i]);
    n = 0;
    writer = false;
  }
};

// Not in the kernel: a queued writer was woken by an unlock and still found
// the lock taken, so a thread that did not queue (typically the releaser,
// through its fast path or as a barger) re-took it first. Being woken by
// every unlock would make it retry against that thread at the rate the lock
// changes hands, and each success moves the lock's cache line, and the data
// it guards, to another CPU. So it sleeps polite_ns without a sleep token
// (no unlock wakes it, no unlock pays for a wakeup) and then tries again;
// a failure after its next ordinary sleep brings it back here. HANDOFF,
// which it sets after handoff_ns of waiting, still bounds how long it waits.
void lost_to_barger(ThreadSlot& me, uint64_t polite_ns, WaitFamily family = WaitFamily::internal) {
  read_pref::ReadHolderSleep holder_asleep;  // a sleep like park_sleep()'s
  sleep_polite_ns(me, me.park.load(arch::mo_lock), polite_ns, family);
  lockevent_inc(LockEvent::rwsem_polite_backoff);
}

// Deviation (steal_read_held): readers of a default-kind lock steal past
// queued writers, so no reader unlock need ever find the count at zero and
// wake the head writer. The head writer without HANDOFF therefore sleeps no
// longer than its handoff deadline (or its own deadline, if earlier), then
// sets HANDOFF itself (try_write_lock()), which ends the stealing. Only while
// readers hold the lock: a writer owner's unlock wakes the head, and a mutex
// (the write side alone) never arms the timer.
bool needs_handoff_timer(const WaitCtx& ctx, const Waiter& w, bool first, uint64_t count) {
  return first && ctx.may_block() && tunables().steal_read_held && reader_count(count) != 0 &&
         !(count & (kWriterLocked | kFlagHandoff)) && !w.handoff_set.load(arch::mo_hint);
}

enum class WriterWake : uint8_t { woken, timed_out, handoff_due };

// A queued writer's sleep, bounded by its handoff deadline when `handoff_timer`.
WriterWake writer_sleep(const WordRefs& r, ThreadSlot& me, uint32_t seen, const Waiter& w, const WaitCtx& ctx,
                        bool handoff_timer, uint64_t polite_ns) {
  const WriterRecheck recheck{r.count, w.writer_flags, polite_ns};
  if (handoff_timer) {
    uint64_t now = now_ns();
    uint64_t to_handoff = w.timeout >= now ? w.timeout - now + 1 : 1;
    if (ctx.mode == WaitCtx::Mode::forever || arch::ns_until(ctx.clock, *ctx.abs) > to_handoff) {
      timespec due = arch::timespec_at(now + to_handoff);
      if (park_sleep(me, seen, WaitCtx::until(CLOCK_MONOTONIC, &due, ctx.family), &recheck) != ETIMEDOUT)
        return WriterWake::woken;
      lockevent_inc(LockEvent::rwsem_handoff_timer);
      return WriterWake::handoff_due;
    }
  }
  return park_sleep(me, seen, ctx, &recheck) == ETIMEDOUT ? WriterWake::timed_out : WriterWake::woken;
}

// The polite backoff is for a writer that lost the lock to the thread that
// released it (as on a mutex): to a writer, or to a lone reader while nobody
// else waits (one thread taking turns with us). Readers that stole the lock
// with others queued hold it until the last one leaves, and that unlock
// wakes us; backing off from them only delays us and everyone queued behind.
bool lost_to_the_releaser(const WordRefs& r, const WaitList& wl) {
  uint64_t c = r.count.load(arch::mo_hint);
  return (c & kWriterLocked) || (reader_count(c) == 1 && wl.singular());
}

}  // namespace
}  // namespace rwsem_detail
}  // namespace lockswap
