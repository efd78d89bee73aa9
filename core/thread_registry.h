// core/thread_registry.h — compact, recycled per-thread ids and type-stable slots.
//
// Design
// ------
// Queue-based locks need to name a thread inside a lock word (the rwsem owner
// field, an MCS tail) and to wake it after its waiter record on the stack may
// already be gone. Both need a per-thread record that outlives any single lock
// operation and can be reached from a small integer:
//
//   id (u32, 1-based, 0 = nobody) --> chunk[(id-1) >> 10][(id-1) & 1023] --> ThreadSlot
//
// * Slots are type-stable: chunks are mmap()ed once and never unmapped, so a
//   stale id read from a lock word always leads to readable memory (the kernel
//   gets the same property from RCU on task_struct). A stale read may describe
//   a different, newer thread; every user treats slot contents as hints or
//   re-validates them.
// * Ids are recycled (freed at thread exit by a pthread key destructor, reused
//   lowest-first-out of a free stack), so the id space tracks the number of live
//   threads, not the number ever created — the same goal as the kernel's mm_cid.
// * kChunks x kSlotsPerChunk (4,194,304) *live* threads have slots of their
//   own; threads beyond that share one (below). There is no cap on threads,
//   live or created over the process lifetime.
// * Allocation happens once per thread, on its first lock slow path, under one
//   registry spinlock (the v6.3 mm_cid "one global lock" design: fine here
//   because it is off every lock path but the first).
// * Async-signal safety: a signal handler may call sem_post (or, under the
//   switch model, poll) at any instruction, and that can count an event or
//   take an id, so reach this registry. The registry lock is never held with
//   signals deliverable (RegistryGuard blocks them), and a registration runs
//   with signals blocked from its first check to its last store, so a handler
//   finds the thread either not registered (and registers it itself, whole)
//   or registered. The exit destructor blocks them too and leaves the thread
//   on the shared slot: what runs after it (later destructors, a handler)
//   counts there and never registers again. docs/signal-safety.md lists every
//   internal lock and which of them a handler can reach.
// * No allocation: the slot is recycled by a pthread key destructor. A key
//   recorded in one of glibc's first kInlineKeys keys lives in the thread's
//   descriptor; a later key's value is stored in a block glibc callocs on
//   the thread's first use of it. So the key is made by the constructor,
//   before main (when a program has made few keys, if any); should it still
//   not be an inline one (libraries initialised before lockswap made 32),
//   every thread uses the shared slot rather than allocate on a lock path.
//
// Address-space exhaustion: no lock, wait or semaphore call may exit or fail
// for lack of memory, yet a thread's first slow path may come after RLIMIT_AS
// is reached or malloc fails. Two layers:
// * Reservation. Chunk 0 (1024 slots) is mapped by a constructor, before main
//   can lower a limit, and chunk k+1 is mapped ahead when chunk k hands out its
//   middle slot, so attaching normally only touches memory mapped long before
//   (RLIMIT_AS counts a mapping when it is made, not when its pages are
//   touched; the pages are not populated, so a process that never has 1024
//   threads pays ~1 MiB of address space and only the pages it uses).
// * The shared slot. When no slot can be had (no recycled slot, no chunk, no
//   inline exit key, or pthread_setspecific cannot record the exit
//   destructor), and after its exit destructor has run, the thread uses one
//   static slot shared by every slotless thread, for the rest of its life
//   (event registry_shared_slot). No thread cap, no exit. Every user copes:
//   - park: several threads may sleep on its park word, so its `blocked` token
//     is never set (it could name one sleeper only) and every wake of it is a
//     futex wake-all after the park bump. Waiters read park before re-checking
//     their condition, so a wake-all after the condition changed cannot be
//     lost; the others wake spuriously, re-check and sleep again.
//   - rwsem OSQ: a shared thread never queues there (the MCS node is
//     per-thread); it skips optimistic spinning and queues (core/rwsem/thread_host.cpp).
//   - rwsem waiter record: taken from a small static pool, else the stack
//     (core/rwsem/thread_host.cpp WaiterRecord), never the slot's own record.
//   - rwsem owner word, may_be_running(): the owner hint names the shared slot;
//     `blocked` stays 0 and cpu_word null, so spinners on such an owner spin
//     within their usual time budget.
//   - SCHED_FIFO rule (core/rwsem/thread_host.cpp): tid is 0 (unknown), so a queued
//     shared writer counts as outranking every reader (conservative).
//   - read_pref waiter entries, cid (thread: id -> same cid for all of them,
//     which percid's counters allow; global: a borrowed id, since no exit hook
//     runs to give one back), fork generation (re-stamped in the child) and
//     lock events (added atomically: several threads write them) need nothing
//     per thread.
//   Mutual exclusion never depends on the slot: lock words decide ownership;
//   slots only park, name spinners and hold hints.
//
// Fork: a child inherits every slot but only the forking thread survives.
// after_fork_in_child() bumps the fork generation and re-stamps the survivor;
// a slot whose generation is older is a ghost, and wakers skip ghost waiters so
// a lock held by the forking thread still works in the child. Lock event
// counters are zeroed in the child: statistics are per process.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/lock_events.h"

namespace lockswap {

// ThreadSlot::event_mode bits.
inline constexpr uint8_t kEventsShared = 1;
inline constexpr uint8_t kEventsApart = 2;

struct alignas(64) ThreadSlot {
  // Slots in chunks are never constructed (mmap zero-fills them); only the
  // static shared slot is, with its id.
  ThreadSlot() = default;
  constexpr explicit ThreadSlot(uint32_t slot_id) : id(slot_id), rwsem_waiter{}, event_mode{kEventsShared} {}

  // Futex word the thread parks on while queued. A waker bumps it after
  // granting, so a sleeper that read the old value cannot miss the grant.
  std::atomic<uint32_t> park{0};
  // Non-zero while the thread sleeps inside lockswap: it cannot be running, so
  // spinning on a lock it owns is pointless. core/rwsem/thread_host.cpp's waker clears it
  // when it wakes the thread, so only the first of several wakers syscalls.
  std::atomic<uint32_t> blocked{0};
  // Readers currently dereferencing cpu_word (see may_be_running()).
  std::atomic<uint32_t> peekers{0};
  // Fork generation the slot belongs to (ghost detection).
  std::atomic<uint32_t> generation{0};
  // Where the kernel publishes this thread's CPU (its rseq cpu_id); nullptr
  // once the thread has exited or when rseq is unavailable.
  std::atomic<const volatile uint32_t*> cpu_word{nullptr};
  uint32_t id = 0;
  int32_t tid = 0;
  ThreadSlot* next_free = nullptr;
  // OSQ node (core/rwsem.h): this thread's entry in the MCS queue of
  // optimistic spinners of whichever rwsem it is spinning on (one at a time).
  // Ids, not pointers, so a queue tail fits the lock's u32 `osq` word. Its own
  // cache line: queue neighbours write it while the owner polls osq_locked,
  // and that traffic must not hit the line wakers and spinners read above.
  alignas(64) std::atomic<uint32_t> osq_next{0};    // successor's slot id, 0 = none
  std::atomic<uint32_t> osq_prev{0};                // predecessor's slot id
  std::atomic<uint32_t> osq_locked{0};              // set by the predecessor: our turn
  // rwsem waiter record (core/rwsem/thread_host.cpp owns the layout): a thread waits on
  // one rwsem at a time, and a record here, unlike one on the stack, stays
  // readable after its thread is gone (a fork ghost met by a later wakeup).
  alignas(64) unsigned char rwsem_waiter[64];
  // Lock event counters: written only by the owning thread, read at exit.
  alignas(64) std::atomic<uint64_t> events[kNumLockEvents];
  // How lockevent_add counts here: 0, plainly; kEventsShared, atomically
  // (several threads count here); kEventsApart, plainly and also into
  // `apart`, for the lock whose call the thread is in (preload's
  // LOCKSWAP_SELECT wrapper sets it around the call and hands `apart` to that
  // lock afterwards). Written only by the owning thread of a slot of its own,
  // never on the shared slot: a plain byte, tested with one compare.
  uint8_t event_mode = 0;
  bool apart_pending = false;  // `apart` holds counts not handed over yet
  std::atomic<uint64_t> apart[kNumLockEvents];
};
static_assert(offsetof(ThreadSlot, osq_next) == 64, "fields other threads poll share one cache line");
static_assert(offsetof(ThreadSlot, rwsem_waiter) == 128, "the OSQ node has a cache line of its own");
static_assert(offsetof(ThreadSlot, events) == 192, "the rwsem waiter record has a cache line of its own");

namespace thread_registry {
inline constexpr uint32_t kSlotsPerChunkShift = 10;
inline constexpr uint32_t kSlotsPerChunk = 1u << kSlotsPerChunkShift;
inline constexpr uint32_t kChunks = 4096;
inline constexpr uint32_t kMaxThreads = kSlotsPerChunk * kChunks;
// Id of the shared slot (see "Address-space exhaustion" above).
inline constexpr uint32_t kSharedSlotId = kMaxThreads + 1;
// glibc keeps the values of keys 0..31 in the thread's descriptor and
// callocs a block for the others (PTHREAD_KEY_2NDLEVEL_SIZE, 2.36 and 2.41;
// docs/signal-safety.md; tests/behaviour/alloc_free.c checks it).
inline constexpr unsigned kInlineKeys = 32;

extern std::atomic<ThreadSlot*> g_chunks[kChunks];
extern std::atomic<uint32_t> g_fork_generation;
extern ThreadSlot g_shared_slot;

// Threads that hold a slot of their own now (attached, not exited; in a fork
// child only the forking thread). Read relaxed: a heuristic's input (the
// rwsem's handoff stretch), never a bound.
inline std::atomic<uint32_t> g_attached_threads{0};

// Runs in an exiting thread that has a slot, before the slot is recycled
// (core/cid/global.cpp returns a LOCKSWAP_CID=global id there); null when unused.
inline std::atomic<void (*)()> g_thread_exit_hook{nullptr};

ThreadSlot& attach_current_thread();

// Maps chunk 0 if it is not mapped yet (the constructor does; idempotent).
void reserve();

// Tests only: while set, no new slot is handed out (as if mmap failed).
void refuse_new_slots_for_testing(bool refuse);
}  // namespace thread_registry

// Test-only pause point, called with the registry lock held while a slot is
// taken and while an exiting thread's slot is given back. Weak and hidden: only a core test program can define it.
extern "C" void lockswap_test_pause_in_registry() __attribute__((weak, visibility("hidden")));

// True for the slot shared by threads that could not get one of their own.
inline bool is_shared(const ThreadSlot& s) { return s.id == thread_registry::kSharedSlotId; }

// Per-thread data read on lock fast paths: kept in static TLS (initial-exec),
// zero-initialised, so touching it never allocates.
struct ThreadLocal {
  ThreadSlot* slot;
  int32_t tid;          // cached gettid(); 0 = not yet known; refreshed after fork
  // Slow paths only: when this thread's current run of writer slow paths that
  // found a woken head writer began (core/rwsem/thread_host.cpp, yield_to_woken_writer);
  // 0 = not in such a run.
  uint64_t woken_seen_ns;
  // The lockref semaphore word whose lock half this thread is taking or
  // holding (core/sem.h, LockrefSemWord): a signal handler's sem call on the
  // same word is then served without that lock.
  const void* sem_half;
};
// `__thread`, not `thread_local`: an extern C++ thread_local is reached through a
// wrapper call (it might need dynamic initialisation); this POD never does.
extern __thread ThreadLocal t_local __attribute__((tls_model("initial-exec")));

inline ThreadSlot& self_slot() {
  ThreadSlot* s = t_local.slot;
  if (__builtin_expect(s != nullptr, 1)) return *s;
  return thread_registry::attach_current_thread();
}

int32_t current_tid_slow();
inline int32_t current_tid() {
  int32_t t = t_local.tid;
  if (__builtin_expect(t != 0, 1)) return t;
  return current_tid_slow();
}

inline ThreadSlot* slot_of(uint32_t id) {
  if (__builtin_expect(id == 0 || id > thread_registry::kMaxThreads, 0))
    return id == thread_registry::kSharedSlotId ? &thread_registry::g_shared_slot : nullptr;
  uint32_t i = id - 1;
  ThreadSlot* chunk = thread_registry::g_chunks[i >> thread_registry::kSlotsPerChunkShift].load(std::memory_order_acquire);
  return chunk ? &chunk[i & (thread_registry::kSlotsPerChunk - 1)] : nullptr;
}

// True when the slot's thread did not survive a fork into this process.
inline bool is_ghost(const ThreadSlot& s) {
  return s.generation.load(std::memory_order_relaxed) !=
         thread_registry::g_fork_generation.load(std::memory_order_relaxed);
}

// Spinner's question: can the thread in `s` be on a CPU right now? False when
// it sleeps inside lockswap; then, with LOCKSWAP_ONCPU's bpf source, what the
// sched_switch map says (core/oncpu.h); otherwise (or when the map does not
// know the thread) false when its last CPU is the one we are running on
// (then it was preempted by us or by a sibling of ours).
bool may_be_running(ThreadSlot& s);

// Wake a parked thread after its grant was published (every thread parked on
// the shared slot).
void unpark(ThreadSlot& s);

// Count one lock event for the calling thread (and, with kEventsApart, for
// the lock whose call it is in).
inline void lockevent_add([[maybe_unused]] LockEvent ev, [[maybe_unused]] uint64_t n = 1) {
#if LOCKSWAP_LOCK_EVENTS
  ThreadSlot& s = self_slot();
  auto& c = s.events[static_cast<uint32_t>(ev)];
  if (__builtin_expect(s.event_mode != 0, 0)) {
    if (s.event_mode & kEventsShared) {
      c.fetch_add(n, std::memory_order_relaxed);  // several threads write it
      return;
    }
    auto& a = s.apart[static_cast<uint32_t>(ev)];
    a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    s.apart_pending = true;
  }
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
#endif
}
inline void lockevent_inc(LockEvent ev) { lockevent_add(ev, 1); }

// Sum of one event over every slot ever mapped (exited threads included) and
// the shared slot.
uint64_t lockevent_total(LockEvent ev);

// Called by preload's pthread_atfork child handler, single-threaded.
void after_fork_in_child();

}  // namespace lockswap
