// arch/rseq.h — reading the kernel-maintained rseq area that glibc registered.
//
// glibc (2.35+) registers one `struct rseq` per thread at thread pointer +
// __rseq_offset and exports its size in __rseq_size (0 when registration is
// off, e.g. GLIBC_TUNABLES=glibc.pthread.rseq=0). The kernel rewrites cpu_id on
// every return to user space after a migration or preemption, and (Linux 6.3+,
// AT_RSEQ_FEATURE_SIZE >= 28) mm_cid, the per-process concurrency id.
//
// Layout (uapi/linux/rseq.h): cpu_id_start @0, cpu_id @4, rseq_cs @8,
// flags @16, node_id @20, mm_cid @24.
#pragma once
#include <sched.h>
#include <sys/auxv.h>

#include <cstddef>
#include <cstdint>

extern "C" {
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
}

namespace lockswap::arch {

inline constexpr std::size_t rseq_cpu_id_offset = 4;
inline constexpr std::size_t rseq_mm_cid_offset = 24;
inline constexpr unsigned long rseq_mm_cid_feature_size = 28;  // offsetof(struct rseq, end) on 6.3+
#ifndef AT_RSEQ_FEATURE_SIZE
#define AT_RSEQ_FEATURE_SIZE 27
#endif

inline bool rseq_registered() { return &__rseq_size != nullptr && __rseq_size != 0; }

// The calling thread's rseq area, or nullptr when glibc did not register one.
inline const volatile unsigned char* rseq_area() {
  if (!rseq_registered()) return nullptr;
  return static_cast<const volatile unsigned char*>(__builtin_thread_pointer()) + __rseq_offset;
}

// Where the kernel publishes the calling thread's current CPU. Other threads may
// read it (that is how a spinner learns whether a lock owner can be running).
inline const volatile uint32_t* rseq_cpu_id_word() {
  auto* area = rseq_area();
  return area ? reinterpret_cast<const volatile uint32_t*>(area + rseq_cpu_id_offset) : nullptr;
}

// CPU the caller is running on (a hint: it may migrate right after).
inline int current_cpu() {
  if (auto* w = rseq_cpu_id_word()) {
    int cpu = static_cast<int>(*w);
    if (cpu >= 0) return cpu;
  }
  return sched_getcpu();
}

// The kernel writes mm_cid whenever it supports it (AT_RSEQ_FEATURE_SIZE >= 28):
// the field lies inside the original 32-byte registration (ORIG_RSEQ_SIZE)
// that every registering glibc makes. __rseq_size is not the test: glibc
// before 2.40 reports 20 there (the fields it uses) while registering 32
// bytes, so `__rseq_size >= 28` would refuse a working mm_cid on glibc 2.36.
inline bool kernel_mm_cid_available() {
  return rseq_registered() && getauxval(AT_RSEQ_FEATURE_SIZE) >= rseq_mm_cid_feature_size;
}

// Where the kernel publishes the caller's mm_cid. Only valid once
// kernel_mm_cid_available() said yes: callers check that once, so this does
// not re-check the registration on every read (a lock fast path reads it).
inline const volatile uint32_t* rseq_mm_cid_word() {
  auto* area = static_cast<const volatile unsigned char*>(__builtin_thread_pointer()) + __rseq_offset;
  return reinterpret_cast<const volatile uint32_t*>(area + rseq_mm_cid_offset);
}

// The kernel's per-process concurrency id of the caller, or -1.
inline int kernel_mm_cid() {
  if (!kernel_mm_cid_available()) return -1;
  return static_cast<int>(*rseq_mm_cid_word());
}

}  // namespace lockswap::arch
