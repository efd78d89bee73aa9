// core/lockref_rwlock.h — a reader-writer lock on one lockref word.
//
// Design
// ------
// The kernel has no lockref rwlock; this is one built from the lockref idea
// (core/lockref.h, docs/kernel-algorithms.md §3): readers enter with
// a lockref get — a bounded lock-free CAS that succeeds only while the lock
// half is clear — and leave with a put; a writer takes the lock half, which
// stops new lock-free readers, and then waits for the count to drain to 0.
//
//   bits   | name            | meaning
//   -------+-----------------+------------------------------------------------
//   0..31  | count           | readers inside (futex word at offset 0)
//   32     | kWriter         | a writer owns the lock half (draining, or in its
//          |                 | critical section)
//   33     | kReaderLock     | a reader whose lock-free retries ran out holds
//          |                 | the lock half for a moment to add itself (the
//          |                 | kernel's fallback: lock; count++; unlock)
//   34     | kReaderSleepers | readers may sleep on the lock half (offset 4)
//   35     | kWriterSleepers | writers may sleep on the lock half
//   36     | kDrainer        | the writer sleeps on the count half until 0
//   37     | kReadTurn       | a write unlock found sleeping readers: writers
//          |                 | wait until a reader has entered (or kReadTurnNs)
//   38..63 | 0               |
//
// All zero = unlocked, no readers, nobody sleeping: zero-filled memory works.
//
// Transitions (R = lock-free reader CAS, W = the writer holding kWriter):
//   read_lock     R: count+1, kReadTurn cleared, while kWriter|kReaderLock
//                 are clear (and, writer-preferring, kWriterSleepers unless
//                 kReadTurn); acquire. Retries exhausted -> fallback: set
//                 kReaderLock by fetch_or (ours only if it was clear), count+1
//                 unless kWriter, then clear kReaderLock (release), kReadTurn
//                 and the sleeper bits, waking the lock-half sleepers.
//                 Blocked -> poll kSpins times, then set kReaderSleepers and
//                 futex-wait on the lock half.
//   recursive     a caller that holds read locks enters by CAS while count > 0,
//                 whatever the lock half says (a draining writer cannot finish
//                 before that caller's own read unlock anyway).
//   write_lock    fetch_or(kWriter): ours if it was clear. A plain CAS would
//                 keep failing while readers churn the count; fetch_or cannot.
//                 If the old value shows kReadTurn (set by a racing unlock) we
//                 give the bit back as a write unlock does. Then drain: until
//                 count == 0 and kReaderLock is clear, poll, then set kDrainer
//                 (the RMW returns the count) and futex-wait on the count half
//                 for that count. Busy/timeout while draining: release exactly
//                 like write_unlock.
//   read_unlock   fetch_sub(1) (release); the last reader out wakes a drainer.
//   write_unlock  clear kWriter|kDrainer|both sleeper bits, set kReadTurn if
//                 readers slept (unless writer-preferring and writers slept
//                 too); release; wake every lock-half sleeper.
//
// Invariants. While W is in its critical section the count is 0 and stays 0:
// lock-free readers need kWriter clear, the fallback backs out when its
// fetch_or shows kWriter, and recursive readers need count > 0. A reader that
// took kReaderLock before W set kWriter adds itself after W's fetch_or, which
// is why W's drain also waits for kReaderLock to clear. Whoever clears a
// sleeper bit wakes every sleeper on that futex; sleepers re-check and set
// their bit again. So the lock keeps no record of who waits: a waiter that
// times out or is cancelled leaves at worst a stale bit, which costs one
// spurious wake (or, for kReaderSleepers, one read turn that no reader claims:
// writers then wait out the kReadTurnNs bound once). The one waiter that does hold
// something is a writer draining (it owns kWriter): a guard releases it if an
// asynchronous cancellation unwinds that writer out of its sleep.
//
// read_unlock must not need the lock half: the lock holder is typically a
// writer draining, i.e. waiting for this very count to fall. So the put is an
// unconditional fetch_sub. That is also why the count half is its own futex:
// the drainer sleeps on the count it saw, and only the put that reaches 0 (and
// sees kDrainer) makes a syscall.
//
// Fairness.
//   * Readers cannot starve writers: once W holds kWriter no new lock-free or
//     fallback reader enters (only recursive ones, which must finish for their
//     own outer read to end), so the count only falls. Writers among
//     themselves race on wake-all (no FIFO), like glibc's rwlock.
//   * Writers cannot starve readers: a write unlock that saw sleeping readers
//     sets kReadTurn, and no writer (blocking or timed) takes kWriter while it
//     is set, until a reader has entered (its CAS clears the bit) or that
//     writer has waited kReadTurnNs since it first saw the bit (then it takes
//     kWriter and clears the turn). So every write critical section that had
//     readers waiting is followed by at least one reader entry: readers as a
//     class always progress. Write trylock ignores the turn (POSIX: fail only
//     when held).
//   * writer_preferring (glibc's PREFER_WRITER_NONRECURSIVE kind): readers
//     also wait while kWriterSleepers is set, except during a read turn, and a
//     write unlock gives no read turn while writers sleep. Unlike glibc there
//     is no direct writer-to-writer handover: the unlock clears the sleeper
//     bits and wakes everyone, so a woken reader may beat the woken writer.
//
// Memory order. Every change of the word is an RMW, so each release heads a
// release sequence through all later changes.
//   * Reader entry (CAS, fallback fetch_or) is acquire: it reads a value at or
//     after the last write unlock (release), so the reader follows that writer.
//   * read_unlock is release; W's drain load that sees count 0 is acquire and
//     reads the last put, whose release sequence contains every earlier put:
//     W follows all readers.
//   * W's fetch_or(kWriter) (and the idle CAS) is acquire: W follows the
//     previous writer's release.
//   * The fallback's count+1 is relaxed: it sits between the acquire fetch_or
//     and the release of kReaderLock, and W only trusts the count once it has
//     seen kReaderLock clear, i.e. after that release in modification order.
//   * Sleeper bits, kDrainer and futex expectations are hints re-validated by
//     the futex compare and the next RMW: relaxed.
//
// Fast paths carry no call (a call anywhere costs every path a stack frame;
// docs/lockref.md, "Frame-free fast paths"). The idle read path is split as
// core/rwsem/rwsem.h's is: read_fast() is the first lockref get alone,
// inline and call-free — one CAS while nothing but readers is in the word
// (no kWriter, kReaderLock or kReadTurn; for the writer-preferring kind no
// kWriterSleepers; a count below kFastReadersLimit, so the reader limit is
// one more bit of the same mask test) by a thread that has its own slot (the
// lockless event is counted there with a plain add). Everything else is a
// tail call to read_lock_slow(), which goes on from the same state: the rest
// of the bounded CAS loop (the inline attempt counts against
// LOCKSWAP_LOCKREF_RETRIES), claiming a read turn, the kReaderLock fallback,
// recursion, the reader-preference rules, waiting, and a thread's first lock
// call (attaching it to the registry is a call). preload keeps its own
// rare work out of line too: the recursive-read lookup runs only in the slow
// path, and the last reader out with a drainer asleep wakes it through
// wake_drainer() (read_unlock_fast() only tests kDrainer). Calling the whole
// bounded loop out of line on every idle read would cost a frame, the retry
// bookkeeping and a call to count the event; write_locked() tests the writer
// bit first (one load, one bit test when clear).
//
// Deviations from the kernel lockref: the lock half is not a spinlock but the
// bits above; readers' fallback takes a reader-only bit (kReaderLock) instead
// of the lock, so that it never waits behind a draining writer it could
// deadlock with; put has no fallback at all (it never needs the lock).
// Process-shared rwlocks are handed to glibc by preload, so every futex here
// is private.
#pragma once
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <ctime>
#include <type_traits>

#include "arch/atomic.h"
#include "arch/clock.h"
#include "arch/futex.h"
#include "arch/relax.h"
#include "core/lockref.h"
#include "core/thread_registry.h"
#include "core/trace.h"
#include "core/read_pref.h"
#include "core/rwsem.h"
#include "core/wait_ctx.h"

namespace lockswap {

namespace lockref_rw {
inline constexpr uint64_t kCountMask = lockref::kCountMask;
inline constexpr uint64_t kWriter = 1ull << 32;
inline constexpr uint64_t kReaderLock = 1ull << 33;
inline constexpr uint64_t kReaderSleepers = 1ull << 34;
inline constexpr uint64_t kWriterSleepers = 1ull << 35;
inline constexpr uint64_t kDrainer = 1ull << 36;
inline constexpr uint64_t kReadTurn = 1ull << 37;
inline constexpr uint64_t kSleepers = kReaderSleepers | kWriterSleepers;
// What stops a lock-free reader's CAS loop.
inline constexpr uint64_t kReaderStop = kWriter | kReaderLock;

static_assert(kWriter == lockref::kLocked, "the writer bit is the lockref lock bit");
static_assert(((kWriter | kReaderLock | kReaderSleepers | kWriterSleepers | kDrainer | kReadTurn) & kCountMask) == 0,
              "flag bits live in the lock half");
static_assert((kWriter & kReaderLock) == 0 && (kWriter & kSleepers) == 0 && (kReaderLock & kSleepers) == 0 &&
                  (kReaderSleepers & kWriterSleepers) == 0 && (kDrainer & (kWriter | kReaderLock | kSleepers)) == 0 &&
                  (kReadTurn & (kWriter | kReaderLock | kSleepers | kDrainer)) == 0,
              "every flag has a bit of its own");

// Readers allowed inside at once (glibc: EAGAIN beyond its maximum). Leaves
// headroom so that the one fallback reader racing a recursive one can never
// carry into the lock half.
inline constexpr uint32_t kMaxReaders = 0x7fff'fffe;
static_assert(kMaxReaders + 1ull < (1ull << 32), "the count never carries into the lock half");

// Counts from this bit up take the slow path (LockrefRwlock::read_fast),
// which enforces kMaxReaders: the inline path's reader limit is then one
// more bit of its single mask test.
inline constexpr uint64_t kFastReadersLimit = 1ull << 30;
static_assert(kFastReadersLimit < kMaxReaders && kMaxReaders + 1ull < 2 * kFastReadersLimit,
              "count < limit <=> the limit bit is clear, for every count the lock can reach");

// Polls before sleeping (every wait: blocked reader, writer, drainer).
inline constexpr unsigned kSpins = 100;
// How long a writer honours a read turn nobody claims (from when it first saw it).
inline constexpr uint64_t kReadTurnNs = 1'000'000;

inline constexpr uint32_t readers_of(uint64_t w) { return static_cast<uint32_t>(w & kCountMask); }
}  // namespace lockref_rw

class LockrefRwlock {
 public:
  // 0, EAGAIN (too many readers), or ctx.give_up_code() (EBUSY / ETIMEDOUT).
  // caller_holds_reads: the caller holds read locks (maybe this one): enter
  // past a writer while readers are inside. writer_preferring: the lock's kind.
  int read_lock(const WaitCtx& ctx, bool caller_holds_reads, bool writer_preferring) {
    FastRead r = read_fast(writer_preferring);
    if (__builtin_expect(r == FastRead::entered, 1)) return 0;
    return read_lock_slow(ctx, caller_holds_reads, writer_preferring, r);
  }

  // The common case of read_lock on its own, for callers that keep per-thread
  // bookkeeping around it (preload): one lock-free get while nothing but
  // readers is in the word, no call anywhere (so no stack frame). Anything
  // else, including a thread's first lock call (counting the event needs its
  // slot) and a read turn to claim, is read_lock_slow()'s, which goes on
  // from here within the same retry bound.
  enum class FastRead : uint8_t { entered, not_tried, cas_failed };
  FastRead read_fast(bool writer_preferring) {
    using namespace lockref_rw;
#if LOCKSWAP_LOCK_EVENTS
    // lockevent_inc() would reload the slot after the CAS and keep the
    // attaching call (a frame) in reach: count on the slot checked here, one
    // this thread alone writes.
    ThreadSlot* me = t_local.slot;
    if (__builtin_expect(me == nullptr || is_shared(*me), 0)) return FastRead::not_tried;
#endif
    uint64_t old = word_.load(arch::mo_hint);
    if (__builtin_expect((old & fast_stop(writer_preferring)) != 0, 0)) return FastRead::not_tried;
    if (__builtin_expect(!word_.compare_exchange_strong(old, old + 1, arch::mo_lock, arch::mo_hint), 0))
      return FastRead::cas_failed;
#if LOCKSWAP_LOCK_EVENTS
    auto& ev = me->events[static_cast<uint32_t>(LockEvent::lockref_lockless)];
    ev.store(ev.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
#endif
    return FastRead::entered;
  }

  // The rest of read_lock after read_fast() did not enter.
  __attribute__((noinline)) int read_lock_slow(WaitCtx ctx, bool caller_holds_reads, bool writer_preferring,
                                               FastRead r) {
    uint32_t failed = 0;
    if (r == FastRead::cas_failed) {
      lockevent_inc(LockEvent::lockref_cas_fail);
      failed = 1;
    }
    uint64_t old;
    Entry e = try_enter(writer_preferring, old, failed);
    if (e == Entry::entered) return 0;
    return read_slow(ctx, caller_holds_reads, writer_preferring, e, old);
  }

  // 0 or ctx.give_up_code(). Write trylock ignores a read turn.
  int write_lock(const WaitCtx& ctx) {
    uint64_t idle = 0;
    if (word_.compare_exchange_strong(idle, lockref_rw::kWriter, arch::mo_lock, arch::mo_hint)) return 0;
    return write_slow(ctx);
  }

  void read_unlock() {
    if (__builtin_expect(!read_unlock_fast(), 0)) wake_drainer();
  }
  // The put alone: false when it was the last reader out and a writer sleeps
  // draining (then the caller must call wake_drainer(), out of line).
  bool read_unlock_fast() {
    using namespace lockref_rw;
    uint64_t old = word_.fetch_sub(1, arch::mo_unlock);
    if (__builtin_expect((old & kDrainer) == 0, 1)) return true;
    return readers_of(old) != 1;
  }
  __attribute__((noinline)) void wake_drainer() { arch::futex_wake(lockref::count_futex(word_), 1, kShared); }

  void write_unlock(bool writer_preferring) {
    using namespace lockref_rw;
    uint64_t old = word_.load(arch::mo_hint), next;
    do {
      next = old & ~(kWriter | kDrainer | kSleepers);
      if ((old & kReaderSleepers) && !(writer_preferring && (old & kWriterSleepers))) next |= kReadTurn;
    } while (!word_.compare_exchange_weak(old, next, arch::mo_unlock, arch::mo_hint));
    if (next & ~old & kReadTurn) lockevent_inc(LockEvent::lockref_read_turn);
    if (old & kSleepers) wake_lock_half();
  }

  // True exactly when the caller, if it holds this lock, holds it for
  // writing: kWriter with no reader inside. A writer still draining never
  // calls unlock, and a reader calling unlock keeps the count >= 1 until its
  // put, so "kWriter alone" would misjudge a reader's unlock during a drain.
  // The writer bit is tested first: on the idle paths it is clear, and one
  // bit test is cheaper than masking both halves and comparing.
  bool write_locked() const {
    uint64_t w = word_.load(arch::mo_hint);
    if (__builtin_expect((w & lockref_rw::kWriter) == 0, 1)) return false;
    return lockref_rw::readers_of(w) == 0;
  }
  uint32_t readers() const { return lockref_rw::readers_of(word_.load(arch::mo_hint)); }

  // For tests and diagnostics.
  uint64_t raw() const { return word_.load(arch::mo_hint); }

 private:
  static constexpr bool kShared = false;
  enum class Entry : uint8_t { entered, overflow, blocked, exhausted };

  static bool wp_blocks(uint64_t w, bool wp) {
    using namespace lockref_rw;
    return wp && (w & kWriterSleepers) && !(w & kReadTurn);
  }
  static bool reader_blocked(uint64_t w, bool wp) { return (w & lockref_rw::kReaderStop) || wp_blocks(w, wp); }

  // What sends a reader off read_fast(): a writer or a fallback reader's
  // moment (kReaderStop), a read turn to claim (the claim clears bits and may
  // wake writers), and for the writer-preferring kind sleeping writers.
  static constexpr uint64_t fast_stop(bool wp) {
    using namespace lockref_rw;
    return kReaderStop | kReadTurn | kFastReadersLimit | (wp ? kWriterSleepers : 0);
  }

  // One run of the lock-free entry (the lockref get), `failed` CAS attempts
  // of the retry bound already spent by the caller.
  Entry try_enter(bool wp, uint64_t& old, uint32_t failed = 0) {
    using namespace lockref_rw;
    uint32_t retries = lockref::retries_after(failed);
    if (retries == lockref::kRetriesSpent) {
      old = word_.load(arch::mo_hint);
      return Entry::exhausted;
    }
    bool wp_blocked = false;
    auto r = lockref::cmpxchg_loop_bounded(word_, kReaderStop, arch::mo_lock, retries, old, [&](uint64_t o, uint64_t& n) {
      wp_blocked = wp_blocks(o, wp);
      if (wp_blocked || readers_of(o) >= kMaxReaders) return lockref::Step::stop;
      n = o + 1;
      if (o & kReadTurn) n &= ~(kReadTurn | kWriterSleepers);  // turn taken: writers may go
      return lockref::Step::attempt;
    });
    switch (r) {
      case lockref::LoopResult::done:
        if ((old & kReadTurn) && (old & kWriterSleepers)) wake_lock_half();
        return Entry::entered;
      case lockref::LoopResult::stopped: return wp_blocked ? Entry::blocked : Entry::overflow;
      case lockref::LoopResult::locked: return Entry::blocked;
      case lockref::LoopResult::exhausted: break;
    }
    return Entry::exhausted;
  }

  // The kernel's fallback, on a reader-only bit: lock; count++; unlock.
  Entry read_fallback(bool wp) {
    using namespace lockref_rw;
    uint64_t old = word_.fetch_or(kReaderLock, arch::mo_lock);
    if (old & kReaderLock) return Entry::blocked;  // another reader's moment: wait for it
    Entry e;
    if ((old & kWriter) || wp_blocks(old, wp)) {
      e = Entry::blocked;
    } else if (readers_of(old) >= kMaxReaders) {
      e = Entry::overflow;
    } else {
      word_.fetch_add(1, arch::mo_hint);
      lockevent_inc(LockEvent::lockref_fallback);
      e = Entry::entered;
    }
    uint64_t clear = kReaderLock | kSleepers | (e == Entry::entered ? kReadTurn : 0);
    if (word_.fetch_and(~clear, arch::mo_unlock) & kSleepers) wake_lock_half();
    return e;
  }

  // A caller holding read locks enters while readers are inside.
  Entry read_recursive() {
    using namespace lockref_rw;
    for (;;) {
      uint64_t old;
      auto r = lockref::cmpxchg_loop(word_, 0, arch::mo_lock, old, [](uint64_t o, uint64_t& n) {
        uint32_t c = readers_of(o);
        if (c == 0 || c >= kMaxReaders) return lockref::Step::stop;
        n = o + 1;
        return lockref::Step::attempt;
      });
      if (r == lockref::LoopResult::done) {
        lockevent_inc(LockEvent::lockref_rlock_recursive);
        return Entry::entered;
      }
      if (r == lockref::LoopResult::stopped) return readers_of(old) == 0 ? Entry::blocked : Entry::overflow;
      // exhausted: each failure was another thread's progress; go again
    }
  }

  __attribute__((noinline)) int read_slow(WaitCtx ctx, bool caller_holds_reads, bool wp, Entry e, uint64_t old) {
    LOCKSWAP_TRACE_ACQUIRE_BEGIN(this, kTraceRead);
    int rc = read_wait(ctx, caller_holds_reads, wp, e, old);
    LOCKSWAP_TRACE_ACQUIRE_END(this, kTraceRead, rc);
    return rc;
  }

  int read_wait(WaitCtx ctx, bool caller_holds_reads, bool wp, Entry e, uint64_t old) {
    using namespace lockref_rw;
    unsigned polls = 0;
    uint64_t blocked_since = 0;  // monotonic ns when a draining writer first held us off
    for (;;) {
      if (e == Entry::exhausted) {
        e = read_fallback(wp);
        old = word_.load(arch::mo_hint);
      }
      if (e == Entry::blocked && caller_holds_reads && readers_of(old) != 0) e = read_recursive();
      if (e == Entry::blocked && !wp && readers_of(old) != 0 && reader_preferred(blocked_since)) e = read_recursive();
      if (e == Entry::entered) return 0;
      if (e == Entry::overflow) return EAGAIN;
      // Blocked; `old` says by what. kReaderLock alone is a reader about to
      // enter, not a writer: even a trylock waits for it.
      bool momentary = (old & kReaderLock) && !(old & kWriter) && !wp_blocks(old, wp);
      if (!ctx.may_block() && !momentary) return EBUSY;
      if (polls < kSpins) {
        ++polls;
        arch::cpu_relax();
      } else {
        uint64_t seen = word_.fetch_or(kReaderSleepers, arch::mo_hint) | kReaderSleepers;
        if (reader_blocked(seen, wp)) {
          lockevent_inc(LockEvent::lockref_rlock_sleep);
          WaitCtx sctx = ctx.may_block() ? ctx : WaitCtx::blocking(ctx.family);
          if (!wp && readers_of(seen) != 0) {
            // Held off by a writer draining a read-held lock: re-check the
            // reader-preference rules at least every kReaderPrefPollNs.
            if (sleep_reader_pref(seen, sctx) == ETIMEDOUT) return ETIMEDOUT;
          } else if (sctx.sleep(lockref::lock_futex(word_), lockref::high_of(seen), kShared) == ETIMEDOUT) {
            return ETIMEDOUT;
          }
        }
      }
      e = try_enter(wp, old);
    }
  }

  // Reader preference where a program may depend on it (default kinds only;
  // core/read_pref.h): a reader held off by a writer that is draining a
  // read-held lock enters anyway when (a) a thread holding a read lock of
  // this lock sleeps inside lockswap — it may be waiting for us — or (b) it
  // has been held off for reader_pref_ns (the rwsem's bound). Everyone
  // else keeps the writer gate.
  bool reader_preferred(uint64_t& blocked_since) {
    if (read_pref::read_holder_asleep_on(this)) {
      lockevent_inc(LockEvent::lockref_rlock_reader_pref);
      return true;
    }
    uint64_t now = now_ns();
    if (blocked_since == 0) blocked_since = now;
    if (now - blocked_since < g_rwsem_tunables.reader_pref_ns) return false;
    lockevent_inc(LockEvent::lockref_rlock_reader_pref);
    return true;
  }

  int sleep_reader_pref(uint64_t seen, const WaitCtx& ctx) {
    uint64_t wake = now_ns() + kReaderPrefPollNs;
    timespec until = arch::timespec_at(wake);
    if (ctx.mode == WaitCtx::Mode::until && ctx.expired()) return ETIMEDOUT;
    run_before_sleep_hook();
    arch::futex_wait(lockref::lock_futex(word_), lockref::high_of(seen), CLOCK_MONOTONIC, &until, kShared);
    run_after_sleep_hook();
    return ctx.mode == WaitCtx::Mode::until && ctx.expired() ? ETIMEDOUT : 0;
  }
  static constexpr uint64_t kReaderPrefPollNs = 1'000'000;

  __attribute__((noinline)) int write_slow(WaitCtx ctx) {
    LOCKSWAP_TRACE_ACQUIRE_BEGIN(this, kTraceWrite);
    int rc = write_wait(ctx);
    LOCKSWAP_TRACE_ACQUIRE_END(this, kTraceWrite, rc);
    return rc;
  }

  int write_wait(WaitCtx ctx) {
    using namespace lockref_rw;
    const bool try_mode = !ctx.may_block();
    uint64_t turn_deadline = 0;  // monotonic ns; 0 = no read turn seen (yet)
    unsigned polls = 0;
    for (;;) {
      uint64_t old = word_.load(arch::mo_hint);
      if (try_mode && ((old & (kWriter | kReaderLock)) || readers_of(old) != 0)) return EBUSY;
      // A read turn only makes writers that may still wait wait: a trylock,
      // or a timed lock whose deadline has passed, takes a free lock now
      // (POSIX: succeed whenever the lock can be had without waiting).
      bool turn_over = try_mode;
      if (!(old & kReadTurn)) {
        turn_deadline = 0;
      } else if (!try_mode) {
        uint64_t now = now_ns();
        if (turn_deadline == 0) turn_deadline = now + kReadTurnNs;
        turn_over = now >= turn_deadline || (ctx.mode == WaitCtx::Mode::until && ctx.expired());
      }
      if (!(old & kWriter) && (!(old & kReadTurn) || turn_over)) {
        uint64_t prev = word_.fetch_or(kWriter, arch::mo_lock);
        if (!(prev & kWriter)) {
          if ((prev & kReadTurn) && !turn_over) {  // an unlock gave readers the turn just now
            write_unlock(false);
            continue;
          }
          if ((prev & kReadTurn) && !try_mode) {
            word_.fetch_and(~kReadTurn, arch::mo_hint);
            lockevent_inc(LockEvent::lockref_read_turn_expired);
          }
          return drain(ctx);
        }
        old = prev;
      }
      if (try_mode) return EBUSY;
      if (polls < kSpins) {
        ++polls;
        arch::cpu_relax();
        continue;
      }
      uint64_t seen = word_.fetch_or(kWriterSleepers, arch::mo_hint) | kWriterSleepers;
      if (!(seen & kWriter) && (!(seen & kReadTurn) || turn_over)) continue;  // free now: go again
      lockevent_inc(LockEvent::lockref_wlock_sleep);
      if (seen & kWriter) {
        if (ctx.sleep(lockref::lock_futex(word_), lockref::high_of(seen), kShared) == ETIMEDOUT) return ETIMEDOUT;
      } else if (sleep_read_turn(seen, turn_deadline, ctx) == ETIMEDOUT) {
        return ETIMEDOUT;
      }
    }
  }

  // Waiting out a read turn: until a reader enters (it wakes us) or the
  // turn's bound passes. A caller's deadline on CLOCK_MONOTONIC is honoured
  // exactly; one on another clock is checked after each wait (so it may be
  // overshot by at most kReadTurnNs).
  int sleep_read_turn(uint64_t seen, uint64_t turn_deadline, const WaitCtx& ctx) {
    timespec until = arch::timespec_at(turn_deadline);
    const timespec* abs = &until;
    if (ctx.mode == WaitCtx::Mode::until && ctx.clock == CLOCK_MONOTONIC &&
        (ctx.abs->tv_sec < until.tv_sec || (ctx.abs->tv_sec == until.tv_sec && ctx.abs->tv_nsec < until.tv_nsec)))
      abs = ctx.abs;
    if (ctx.mode == WaitCtx::Mode::until && ctx.expired()) return ETIMEDOUT;
    run_before_sleep_hook();
    arch::futex_wait(lockref::lock_futex(word_), lockref::high_of(seen), CLOCK_MONOTONIC, abs, kShared);
    run_after_sleep_hook();
    return ctx.mode == WaitCtx::Mode::until && ctx.expired() ? ETIMEDOUT : 0;
  }

  // We hold kWriter: wait for the readers inside (and a fallback reader's
  // moment) to end. Giving up releases the lock exactly like write_unlock.
  int drain(const WaitCtx& ctx) {
    using namespace lockref_rw;
    unsigned polls = 0;
    DrainGuard holding_writer{*this};
    for (;;) {
      uint64_t old = word_.load(arch::mo_lock);
      if (readers_of(old) == 0 && !(old & kReaderLock)) return holding_writer.keep(0);
      if (!ctx.may_block()) {
        return holding_writer.give_up(EBUSY);
      }
      if (polls < kSpins) {
        ++polls;
        arch::cpu_relax();
        continue;
      }
      int rc = 0;
      if (readers_of(old) == 0) {  // only a fallback reader's moment
        uint64_t seen = word_.fetch_or(kWriterSleepers, arch::mo_hint) | kWriterSleepers;
        if (readers_of(seen) == 0 && (seen & kReaderLock)) {
          lockevent_inc(LockEvent::lockref_drain_sleep);
          rc = ctx.sleep(lockref::lock_futex(word_), lockref::high_of(seen), kShared);
        }
      } else {
        uint32_t c = readers_of(word_.fetch_or(kDrainer, arch::mo_hint));
        if (c != 0) {
          lockevent_inc(LockEvent::lockref_drain_sleep);
          rc = ctx.sleep(lockref::count_futex(word_), c, kShared);
        }
      }
      if (rc == ETIMEDOUT) {
        old = word_.load(arch::mo_lock);
        if (readers_of(old) == 0 && !(old & kReaderLock)) return holding_writer.keep(0);  // drained as time ran out
        return holding_writer.give_up(ETIMEDOUT);
      }
    }
  }

  // The draining writer's hold on kWriter. Every normal exit says keep() or
  // give_up(); only an asynchronous cancellation that unwinds the writer out
  // of its sleep leaves the guard armed, and then the destructor releases
  // the lock half so readers and writers behind it go on.
  struct DrainGuard {
    LockrefRwlock& l;
    bool armed = true;
    int keep(int rc) {
      armed = false;
      return rc;
    }
    int give_up(int rc) {
      armed = false;
      l.write_unlock(false);
      return rc;
    }
    ~DrainGuard() {
      if (armed) l.write_unlock(false);
    }
  };

  void wake_lock_half() {
    lockevent_inc(LockEvent::lockref_rw_wake);
    arch::futex_wake(lockref::lock_futex(word_), arch::futex_wake_all, kShared);
  }

  static uint64_t now_ns() { return arch::monotonic_ns(); }

  std::atomic<uint64_t> word_;
};
static_assert(sizeof(LockrefRwlock) == 8);
static_assert(std::is_standard_layout_v<LockrefRwlock>);

}  // namespace lockswap
