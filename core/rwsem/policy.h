// core/rwsem/policy.h — which kernel's rw_semaphore: the two policies, and the
// owner-word bits both hosts share.
//
// RwsemSteal and RwsemRspin pick the kernel version whose rules
// core/rwsem/rules.h applies (its design block says what each one does).
// Both hosts, the thread's lock (core/rwsem/rwsem.h) and the process-shared
// one (core/rwsem/shared.h), are instantiated for both. The owner word's flag
// bits are the kernel's, at the same positions in both representations:
// what the owner names above them (a ThreadSlot*, a process number) is the
// host's.
#pragma once
#include <cstdint>

namespace lockswap {
namespace rwsem {

// --- owner word (the nonspinnable bits are per policy, below) ---
inline constexpr uint64_t kReaderOwned = 1ull << 0;

// Readers granted by one wakeup (MAX_READERS_WAKEUP, d3681e269fff).
inline constexpr uint32_t kMaxReadersWakeup = 256;

}  // namespace rwsem

// Linux >= v5.11: reader lock stealing, no reader spinning, one NONSPINNABLE bit.
struct RwsemSteal {
  static constexpr bool reader_spinning = false;
  static constexpr uint64_t kRdNonspinnable = 1ull << 1;  // both names are the one
  static constexpr uint64_t kWrNonspinnable = 1ull << 1;  // RWSEM_NONSPINNABLE bit
  static constexpr uint64_t kNonspinnable = kRdNonspinnable | kWrNonspinnable;
  static constexpr uint64_t kOwnerFlags = rwsem::kReaderOwned | kNonspinnable;
};

// Linux v5.10: reader optimistic spinning with adaptive disabling.
struct RwsemRspin {
  static constexpr bool reader_spinning = true;
  static constexpr uint64_t kRdNonspinnable = 1ull << 1;  // readers may not spin
  static constexpr uint64_t kWrNonspinnable = 1ull << 2;  // writers may not spin
  static constexpr uint64_t kNonspinnable = kRdNonspinnable | kWrNonspinnable;
  static constexpr uint64_t kOwnerFlags = rwsem::kReaderOwned | kNonspinnable;
};

static_assert((RwsemSteal::kNonspinnable & rwsem::kReaderOwned) == 0 &&
                  (RwsemRspin::kNonspinnable & rwsem::kReaderOwned) == 0,
              "nonspinnable bits never alias READER_OWNED");
static_assert(RwsemSteal::kRdNonspinnable == RwsemRspin::kRdNonspinnable,
              "bit 1 is what a new reader owner keeps, in both versions");
static_assert(RwsemSteal::kOwnerFlags < 8 && RwsemRspin::kOwnerFlags < 8, "owner flags in bits 0-2");

}  // namespace lockswap
