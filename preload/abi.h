// preload/abi.h — the only place that knows glibc's pthread object layouts.
//
// lockswap keeps its state inside the caller's objects (no side table, no
// per-lock allocation). Each variant overlays its words on the bytes glibc
// leaves free, and keeps the fields glibc defines as ABI where glibc put them:
//
//   pthread_mutex_t (40 B)              pthread_rwlock_t (56 B)
//   off  field                           off  field
//    0   algorithm word A (u64)           0   algorithm words (24 B)
//    8   owner TID      (glibc __owner)  24   writer TID (glibc __cur_writer)
//   12   recursion depth                 28   __shared   (glibc ABI, read-only)
//   16   __kind         (glibc ABI)      32   algorithm word (u32)
//   20   algorithm word B (u32)          48   __flags    (glibc ABI: rwlock kind)
//   24   algorithm words C, D (2 x u64)
//
//   pthread_cond_t (48 B): core::Cond in the first 16 bytes.
//
//   sem_t (32 B)    glibc's struct new_sem (64-bit atomics)
//    0   u64  value (low 32 bits) | glibc: waiter count, lockswap: the
//             variant's own use (high 32 bits); zero after sem_init/sem_open
//    8   i32  private: glibc stores 0 (private futexes) for pshared=0 and 128
//             (LLL_SHARED: shared futexes) for pshared!=0 and for sem_open
//   A semaphore glibc's sem_open initialised is therefore a valid fresh
//   semaphore for every variant (core/sem.h keeps this layout, and
//   preload/pthread/variants/sem.h asserts it).
//
// LOCKSWAP_SELECT (preload/config/select.h) keeps each object's chosen variant in
// the object, as a tag (0 = not decided yet), in bits glibc never reads:
//   pthread_mutex_t  bits 10..13 of __kind (glibc reads __kind masked to its
//                    type, flag and elision bits, 0..9; a protect-kind
//                    mutex's ceiling lives in __lock, not __kind)
//   pthread_rwlock_t the tail padding at 52
//   sem_t            the u32 at 16 (glibc's new_sem ends at 16)
// docs/glibc-abi.md lists the glibc code these facts were checked against.
//
// All-zero bytes mean "unlocked, default kind" for every variant, so static
// initializers and zero-filled memory work without an init call.
// Objects glibc must own (robust, priority-inherit/protect, process-shared)
// are recognised from __kind / __shared and delegated to glibc whole.
// The glibc versions these layouts were checked on, and every other glibc
// fact lockswap relies on: preload/glibc_facts.h.
#pragma once
#include <pthread.h>
#include <linux/futex.h>
#include <semaphore.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace lockswap::abi {

// __kind bits (glibc nptl/pthreadP.h).
inline constexpr int kKindTypeMask = 3;       // PTHREAD_MUTEX_KIND_MASK_NP
inline constexpr int kKindNormal = 0;         // PTHREAD_MUTEX_TIMED_NP
inline constexpr int kKindRecursive = 1;
inline constexpr int kKindErrorcheck = 2;
inline constexpr int kKindAdaptive = 3;
inline constexpr int kKindRobust = 16;
inline constexpr int kKindPrioInherit = 32;
inline constexpr int kKindPrioProtect = 64;
inline constexpr int kKindPsharedBit = 128;
inline constexpr int kKindGlibcOwned = kKindRobust | kKindPrioInherit | kKindPrioProtect | kKindPsharedBit;
inline constexpr int kKindDestroyed = -1;     // what pthread_mutex_destroy leaves
// glibc ignores these when picking the algorithm (lock elision hints, <= 2.42).
inline constexpr int kKindElisionBits = 256 | 512;

// rwlock __flags values.
inline constexpr unsigned kRwPreferReader = 0;
inline constexpr unsigned kRwPreferWriter = 1;
inline constexpr unsigned kRwPreferWriterNonrecursive = 2;

struct MutexObject {
  std::atomic<uint64_t> word_a;    //  0
  std::atomic<int32_t> owner_tid;  //  8
  uint32_t recursion;              // 12 (only touched by the owner)
  std::atomic<int32_t> kind;       // 16
  std::atomic<uint32_t> word_b;    // 20
  std::atomic<uint64_t> word_c;    // 24
  std::atomic<uint64_t> word_d;    // 32
};

struct RwlockObject {
  std::atomic<uint64_t> word_a;     //  0
  std::atomic<uint64_t> word_b;     //  8
  std::atomic<uint64_t> word_c;     // 16
  std::atomic<int32_t> writer_tid;  // 24
  std::atomic<int32_t> shared;      // 28
  std::atomic<uint32_t> word_d;     // 32
  uint32_t unused_36[3];            // 36
  std::atomic<uint32_t> flags;      // 48
  uint32_t unused_52;               // 52
};

// Where glibc itself keeps the ABI fields we preserve.
static_assert(sizeof(MutexObject) <= sizeof(pthread_mutex_t));  // 40 on x86-64, 48 on aarch64
static_assert(offsetof(MutexObject, owner_tid) == offsetof(pthread_mutex_t, __data.__owner));
static_assert(offsetof(MutexObject, kind) == offsetof(pthread_mutex_t, __data.__kind));
static_assert(alignof(pthread_mutex_t) >= alignof(MutexObject));
static_assert(sizeof(RwlockObject) == sizeof(pthread_rwlock_t));
static_assert(offsetof(RwlockObject, writer_tid) == offsetof(pthread_rwlock_t, __data.__cur_writer));
static_assert(offsetof(RwlockObject, shared) == offsetof(pthread_rwlock_t, __data.__shared));
static_assert(offsetof(RwlockObject, flags) == offsetof(pthread_rwlock_t, __data.__flags));
static_assert(alignof(pthread_rwlock_t) >= alignof(RwlockObject));

// sem_t: value at 0, `private` at 8 (glibc nptl/semaphoreP.h, new_sem).
inline constexpr std::size_t kSemValueOffset = 0;
inline constexpr std::size_t kSemPrivateOffset = 8;
// What glibc stores in `private` for a process-shared semaphore (LLL_SHARED;
// 0 = LLL_PRIVATE). Observed on glibc 2.36: sem_init(s, 0, v) stores 0,
// sem_init(s, 1, v) stores 128.
inline constexpr int32_t kSemSharedFlag = 128;
static_assert(kSemSharedFlag == FUTEX_PRIVATE_FLAG, "glibc XORs it into its futex op");
static_assert(sizeof(sem_t) == 32 && alignof(sem_t) >= 8, "64-bit glibc sem_t");

// Selection tags (see the file comment). The tag is the family's variant enum
// value (preload/config/registry.h) in its low three bits, 0 while undecided, plus
// kTagSelected on a lock a rule chose whose lock events are counted apart
// (preload/config/select.h).
inline constexpr unsigned kTagVariantMask = 7;
inline constexpr unsigned kTagSelected = 8;
inline constexpr unsigned kTagValues = 16;
static_assert((kTagVariantMask | kTagSelected) == kTagValues - 1);
inline constexpr int kKindTagShift = 10;
inline constexpr int kKindTagMask = static_cast<int>(kTagValues - 1) << kKindTagShift;
static_assert((kKindTagMask & (127 | kKindElisionBits)) == 0, "glibc's type, flag and elision bits stay clear");
inline constexpr std::size_t kSemTagOffset = 16;
static_assert(kSemTagOffset + sizeof(uint32_t) <= sizeof(sem_t));

inline unsigned mutex_tag(int kind) { return static_cast<unsigned>(kind & kKindTagMask) >> kKindTagShift; }
inline int without_tag(int kind) { return kind & ~kKindTagMask; }
inline int with_tag(int kind, unsigned tag) { return without_tag(kind) | static_cast<int>(tag << kKindTagShift); }

inline MutexObject& obj(pthread_mutex_t* m) { return *reinterpret_cast<MutexObject*>(m); }
inline RwlockObject& obj(pthread_rwlock_t* l) { return *reinterpret_cast<RwlockObject*>(l); }
inline std::atomic_ref<uint32_t> rwlock_tag(pthread_rwlock_t* l) { return std::atomic_ref<uint32_t>(obj(l).unused_52); }
inline std::atomic_ref<uint32_t> sem_tag(sem_t* s) {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(s) + kSemTagOffset));
}
inline bool sem_shared(sem_t* s) {
  return std::atomic_ref<int32_t>(*reinterpret_cast<int32_t*>(reinterpret_cast<char*>(s) + kSemPrivateOffset))
             .load(std::memory_order_relaxed) != 0;
}

// The calling thread's cancellation word: glibc's struct pthread
// `cancelhandling`, read the way glibc's own pthread_testcancel() reads it
// (nptl/pthread_testcancel.c, nptl/descr.h), so that sem_wait's fast path can
// skip the call when no request could act. x86-64 keeps struct pthread at the
// thread pointer (TLS_TCB_AT_TP); the word is at +0x308 on 2.36 and 2.41, and
// a deferred request acts when CANCELED is set and CANCELSTATE (disabled),
// EXITING and TERMINATED are clear. Elsewhere the answer is always "may act",
// and glibc's pthread_testcancel() decides, as it does whenever this says so.
inline constexpr std::size_t kCancelHandlingOffset = 0x308;
inline constexpr unsigned kCancelStateDisabled = 1u << 0;
inline constexpr unsigned kCanceled = 1u << 3;
inline constexpr unsigned kExiting = 1u << 4;
inline constexpr unsigned kTerminated = 1u << 5;
inline constexpr unsigned kCancelActsMask = kCancelStateDisabled | kCanceled | kExiting | kTerminated;
static_assert(kCancelActsMask == 0x39, "pthread_testcancel's own mask on 2.36 and 2.41");
inline bool cancel_may_act() {
#if defined(__x86_64__)
  const auto* self = static_cast<const char*>(__builtin_thread_pointer());
  const auto* word = reinterpret_cast<const int*>(self + kCancelHandlingOffset);
  return (static_cast<unsigned>(__atomic_load_n(word, __ATOMIC_RELAXED)) & kCancelActsMask) == kCanceled;
#else
  return true;
#endif
}

// Kinds decided per object, at every call (objects may be re-initialised).
inline bool glibc_owned(int kind) { return kind & kKindGlibcOwned; }
inline bool glibc_owned(const RwlockObject& o) { return o.shared.load(std::memory_order_relaxed) != 0; }

}  // namespace lockswap::abi
