// preload/glibc_facts.h — the glibc versions lockswap has been checked
// against, and every glibc fact that could change from one version to the
// next, with where it is used and what checks it.
//
// Checked versions: 2.36 (Debian 12, every CI run) and 2.41 (Debian 13, the
// glibc241 test tier: scripts/glibc_tier.sh, tests/glibc_tier/). On any other
// glibc the library stops before main (preload/config/config.cpp), because the facts
// below are read from memory glibc owns: a wrong one corrupts locks silently.
//
//   fact                                        2.36  2.41  used in           checked by
//   pthread_mutex_t 40 B: __owner @8, __kind @16 yes   yes   abi.h             static_assert; glibc_facts_test (both);
//                                                                             start-up: mutex_kind, mutex_owner
//   __kind bits: type 0-3, robust 16, PI 32,     yes   yes   abi.h             glibc_facts_test MutexKinds;
//     PP 64, pshared 128, elision 256|512;                                    start-up: mutex_kind (not PP)
//     destroy leaves -1
//   pthread_rwlock_t 56 B: __cur_writer @24,     yes   yes   abi.h             static_assert; RwlockFields;
//     __shared @28, __flags @48                                               start-up: rwlock_fields
//   pthread_cond_t 48 B (lockswap: first 16 B)   yes   yes   mutex.cpp         static_assert (tier compile)
//   sem_t 32 B: value @0, private @8 (0 / 128)   yes   yes   abi.h, core/sem.h SemFields; start-up: sem_fields
//   x86-64: struct pthread at the thread         yes   yes   abi.h             CancelHandling;
//     pointer, cancelhandling @0x308; a                                       start-up: thread_pointer,
//     deferred request acts when (word & 0x39)                                cancel_word (the DISABLE
//     == 0x08 (pthread_testcancel's own test)                                 bit only)
//   PTHREAD_{MUTEX,RWLOCK,COND}_INITIALIZER are  yes   yes   abi.h             StaticInitialisers;
//     all-zero bytes; the _NP initialisers set                                start-up: zero_init (not
//     only __kind / __flags                                                   the _NP initialisers)
//   pthread_cond_* default version GLIBC_2.3.2,  yes   yes   real.cpp          SymbolVersions
//     old ABI at GLIBC_2.2.5 (x86-64)
//   every glibc function lockswap forwards to    yes   yes   real.h            SymbolVersions
//     is reachable with dlsym(RTLD_NEXT)
//   rseq area at tp + __rseq_offset, cpu_id @4,  yes   yes   arch/rseq.h       Rseq;
//     mm_cid @24; __rseq_size 20 on 2.36 (the                                 start-up: rseq (cpu_id;
//     fields glibc uses), the kernel's                                        mm_cid below 4096)
//     AT_RSEQ_FEATURE_SIZE on 2.41
//   the cancellation points among the            yes   yes   mutex.cpp,        CancellationPoints
//     interposed functions (kCancels*)                        sem.cpp,
//                                                             core/cancel.h
//
// Nothing lockswap relies on differs between 2.36 and 2.41 except the value
// of __rseq_size, which lockswap reads only as "registered or not".
//
// "start-up: NAME": the library checks that fact again before main in every
// process, on every glibc, checked or not, and stops with exit status 2
// naming NAME when it does not hold (preload/self_check.cpp). The version
// check trusts a name; this looks at what glibc does. What it leaves to the
// tests needs a second or a cancelled thread, or system calls that would
// cost about as much as the rest together (see there).
#pragma once
#include <cstddef>
#include <string_view>

namespace lockswap::glibc_facts {

template <std::size_t N>
constexpr bool listed(const std::string_view (&set)[N], std::string_view name) {
  for (std::string_view n : set)
    if (n == name) return true;
  return false;
}

// The glibc versions (gnu_get_libc_version()) every fact above was checked
// against. Exact strings: a development snapshot ("2.41.9000") is unchecked.
inline constexpr std::string_view kCheckedVersions[] = {"2.36", "2.41"};

constexpr bool version_checked(std::string_view version) { return listed(kCheckedVersions, version); }

// The interposed functions that are cancellation points in glibc, in two
// sets. Every other interposed function (mutex, rwlock, sem_trywait,
// sem_post, mtx_*, signal/broadcast) is none, even while it blocks.
// Acting on a request pending at entry, even with no need to wait (glibc
// tests for it first: POSIX's "shall occur" for these two):
inline constexpr std::string_view kCancelsBeforeWaiting[] = {"sem_wait", "sem_timedwait"};
// Acting on a request while blocked (sem_clockwait only here: glibc takes a
// free unit without looking at a pending request):
inline constexpr std::string_view kCancelsWhileWaiting[] = {
    "pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait", "cnd_wait", "cnd_timedwait",
    "sem_wait",          "sem_timedwait",          "sem_clockwait",
};

}  // namespace lockswap::glibc_facts
