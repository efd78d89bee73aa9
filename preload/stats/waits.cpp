// preload/stats/waits.cpp — the per-site wait table (preload/stats/waits.h) and the
// syscall() interposer that finds a program's own futex locks.
//
// syscall() is exported so that a program (or a library: jemalloc, Go's
// runtime, a hand-made futex lock) that sleeps with
// syscall(SYS_futex, FUTEX_WAIT, ...) can be seen waiting. It must be glibc's
// syscall() in every other respect:
//
// - Same result and errno: a raw result in [-4095, -1] is an error, errno is
//   its negation and the call returns -1; anything else is returned as is
//   (glibc's x86_64 `cmp $-4095,%rax; jae` and aarch64 `cmn x0,#4095; b.cs`).
// - Six long arguments forwarded, whatever the caller passed (glibc reads six
//   too: registers, and the stack word of the sixth on x86_64).
// - Not a cancellation point: glibc's syscall() never enables cancellation,
//   and neither does this one. A thread with deferred cancellation stays
//   blocked in a futex wait until it is woken; its next cancellation point
//   acts.
// - Async-signal-safe, no allocation, no lock.
//
// Forwarding: the system call is made here, inline (x86_64, aarch64), not
// through glibc's syscall() found with dlsym. dlsym takes the loader's lock
// and may allocate (its error string), so a lazy lookup would break the two
// last promises for a caller that comes before our constructor, and that
// caller can be liblockswap itself: core's futex sleeps and wakes
// (arch/futex.h) bind to this export, and a semaphore post from a signal
// handler wakes through it. The inline call has nothing to resolve and
// nothing to take, and its error convention is a documented kernel ABI, so
// matching glibc is two lines. Other ISAs forward to glibc's syscall()
// resolved by the constructor, lazily before it.
//
// Cancellation unwinding through this frame: core runs its futex sleeps with
// asynchronous cancellation enabled around the call (preload/pthread/entry.h), so a
// cancellation may land on the syscall instruction here, and the forced
// unwind must pass through. glibc declares syscall() noexcept; the definitions
// below leave the specifier out (GCC accepts that against a system
// header). What the unwinder needs is a frame without a personality routine
// or a call-site table: the function has no cleanups and calls only
// functions of this file that cannot throw, so it gets none (its CIE is
// "zR"), whereas a terminate region would end the process on an unwind from
// an instruction outside every call site. It is built with asynchronous
// unwind tables (preload/CMakeLists.txt), exact at every instruction.
//
// With statistics on (waits::on()), a futex wait made from outside
// liblockswap is timed and recorded as a `futex` site at its caller. Waits
// from inside liblockswap pass through uncounted: they are lockswap's own
// sleeps, counted as wait_<family>_ns (core/wait_ctx.h), and counting them
// here would count them twice.
#include <dlfcn.h>
#include <link.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unwind.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>

#include "arch/clock.h"
#include "preload/config/config.h"
#include "preload/stats/waits.h"

#define LOCKSWAP_EXPORT extern "C" __attribute__((visibility("default")))

namespace lockswap::waits {

std::atomic<bool> g_on{false};
__thread uintptr_t t_c11_caller __attribute__((tls_model("initial-exec")));

namespace {

Site g_sites[kSlots];
std::atomic<uint64_t> g_dropped{0};

// liblockswap's executable segment(s): [start, end). One range covers them:
// the library's text is one PT_LOAD with PF_X.
std::atomic<uintptr_t> g_text_start{0}, g_text_end{0};

int find_own_text(dl_phdr_info* info, size_t, void* self) {
  const auto me = reinterpret_cast<uintptr_t>(self);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    uintptr_t start = info->dlpi_addr + ph.p_vaddr, end = start + ph.p_memsz;
    if (me < start || me >= end) continue;
    g_text_start.store(start, std::memory_order_relaxed);
    g_text_end.store(end, std::memory_order_release);
    return 1;
  }
  return 0;
}

uint64_t key_of(Kind kind, uintptr_t ip) { return (static_cast<uint64_t>(kind) + 1) << 56 | (ip & ((1ull << 56) - 1)); }

// The delay site's callers: the frames after the one that returns to `ip`.
struct Unwind {
  uintptr_t ip;
  bool past_site = false;
  unsigned seen = 0;
  uint32_t len = 0;
  uintptr_t* out;
};

_Unwind_Reason_Code unwind_step(_Unwind_Context* ctx, void* arg) {
  auto* u = static_cast<Unwind*>(arg);
  uintptr_t pc = _Unwind_GetIP(ctx);
  if (pc == 0 || ++u->seen > 16) return _URC_END_OF_STACK;
  if (!u->past_site) {
    u->past_site = pc == u->ip;
    return _URC_NO_REASON;
  }
  u->out[u->len++] = pc;
  return u->len == kBacktraceDepth ? _URC_END_OF_STACK : _URC_NO_REASON;
}

// libgcc's unwinder: no allocation (the object's unwind tables are found
// with glibc's _dl_find_object, lock-free since 2.35). Taken once per delay
// site, when the site is inserted.
uint32_t callers_of(uintptr_t ip, uintptr_t* out) {
  Unwind u{ip, false, 0, 0, out};
  _Unwind_Backtrace(unwind_step, &u);
  return u.len;
}

void raise_max(std::atomic<uint64_t>& max, uint64_t v) {
  uint64_t cur = max.load(std::memory_order_relaxed);
  while (v > cur && !max.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

Site* find_or_insert(Kind kind, const char* call, uintptr_t ip) {
  const uint64_t key = key_of(kind, ip);
  // Fibonacci hashing of the address: call sites are a few bytes apart.
  uint32_t h = static_cast<uint32_t>((key * 0x9e3779b97f4a7c15ull) >> 54) & (kSlots - 1);
  for (uint32_t probe = 0; probe < kSlots; ++probe, h = (h + 1) & (kSlots - 1)) {
    Site& s = g_sites[h];
    uint64_t k = s.key.load(std::memory_order_acquire);
    if (k == key) return &s;
    if (k != 0) continue;
    if (!s.key.compare_exchange_strong(k, key, std::memory_order_acq_rel, std::memory_order_acquire)) {
      if (k == key) return &s;
      continue;
    }
    s.call = call;
    if (kind == Kind::delay) s.bt_len = callers_of(ip, s.bt);
    s.ready.store(1, std::memory_order_release);
    return &s;
  }
  return nullptr;
}

void clear_in_child() { after_fork_in_child(); }

}  // namespace

void init() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  load_config();
  dl_iterate_phdr(find_own_text, reinterpret_cast<void*>(&find_own_text));
  if (g_config.stats) {
    pthread_atfork(nullptr, nullptr, clear_in_child);
    g_on.store(true, std::memory_order_relaxed);
  }
}

bool in_own_text(uintptr_t ip) {
  uintptr_t end = g_text_end.load(std::memory_order_acquire);
  // Not found yet: count nothing as the program's.
  if (end == 0) return true;
  return ip >= g_text_start.load(std::memory_order_relaxed) && ip < end;
}

void record(Kind kind, const char* call, uintptr_t ip, uint64_t ns) {
  const int saved_errno = errno;
  if (Site* s = find_or_insert(kind, call, ip)) {
    s->n.fetch_add(1, std::memory_order_relaxed);
    s->ns.fetch_add(ns, std::memory_order_relaxed);
    raise_max(s->max_ns, ns);
  } else {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
  }
  errno = saved_errno;
}

const Site* sites() { return g_sites; }
uint64_t dropped() { return g_dropped.load(std::memory_order_relaxed); }

void totals(uint64_t n[kKinds], uint64_t ns[kKinds]) {
  for (unsigned k = 0; k < kKinds; ++k) n[k] = ns[k] = 0;
  for (const Site& s : g_sites) {
    uint64_t key = s.key.load(std::memory_order_acquire);
    if (key == 0) continue;
    unsigned k = static_cast<unsigned>(key >> 56) - 1;
    if (k >= kKinds) continue;
    n[k] += s.n.load(std::memory_order_relaxed);
    ns[k] += s.ns.load(std::memory_order_relaxed);
  }
}

// Only the forking thread runs in the child: nothing races these stores.
void after_fork_in_child() {
  for (Site& s : g_sites) {
    s.ready.store(0, std::memory_order_relaxed);
    s.key.store(0, std::memory_order_relaxed);
    s.n.store(0, std::memory_order_relaxed);
    s.ns.store(0, std::memory_order_relaxed);
    s.max_ns.store(0, std::memory_order_relaxed);
    s.bt_len = 0;
  }
  g_dropped.store(0, std::memory_order_relaxed);
}

namespace {

// Before main, after the configuration.
__attribute__((constructor)) void init_at_start() { init(); }

// The futex commands that sleep.
bool is_futex_wait(long number, long op) {
#ifdef SYS_futex_waitv
  if (number == SYS_futex_waitv) return true;
#endif
  if (number != SYS_futex) return false;
  switch (static_cast<int>(op) & FUTEX_CMD_MASK) {
    case FUTEX_WAIT:
    case FUTEX_WAIT_BITSET:
    case FUTEX_LOCK_PI:
#ifdef FUTEX_LOCK_PI2
    case FUTEX_LOCK_PI2:
#endif
    case FUTEX_WAIT_REQUEUE_PI:
#ifdef FUTEX_WAIT_MULTIPLE
    case FUTEX_WAIT_MULTIPLE:
#endif
      return true;
    default:
      return false;
  }
}

#if !defined(__x86_64__) && !defined(__aarch64__)
using GlibcSyscall = long (*)(long, ...);
std::atomic<GlibcSyscall> g_glibc_syscall{nullptr};
__attribute__((constructor)) void resolve_glibc_syscall() {
  g_glibc_syscall.store(reinterpret_cast<GlibcSyscall>(dlsym(RTLD_NEXT, "syscall")), std::memory_order_release);
}
#endif

// The raw system call: the kernel's result (a negated errno on failure).
__attribute__((always_inline)) inline long raw_syscall(long number, long a1, long a2, long a3, long a4, long a5,
                                                       long a6) {
#if defined(__x86_64__)
  long rc;
  register long r10 __asm__("r10") = a4;
  register long r8 __asm__("r8") = a5;
  register long r9 __asm__("r9") = a6;
  __asm__ volatile("syscall"
                   : "=a"(rc)
                   : "0"(number), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return rc;
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = number;
  register long x0 __asm__("x0") = a1;
  register long x1 __asm__("x1") = a2;
  register long x2 __asm__("x2") = a3;
  register long x3 __asm__("x3") = a4;
  register long x4 __asm__("x4") = a5;
  register long x5 __asm__("x5") = a6;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
  return x0;
#else
  GlibcSyscall fn = g_glibc_syscall.load(std::memory_order_acquire);
  if (fn == nullptr) {
    resolve_glibc_syscall();
    fn = g_glibc_syscall.load(std::memory_order_acquire);
  }
  // glibc's convention already applied: undo it, so that the caller below
  // applies it once.
  long rc = fn(number, a1, a2, a3, a4, a5, a6);
  return rc == -1 ? -static_cast<long>(errno) : rc;
#endif
}

// glibc's error convention. Setting errno is out of line (a call for its
// address), so the pass-through reaches it by a tail jump and keeps no frame.
__attribute__((noinline)) long syscall_failed(long rc) {
  errno = static_cast<int>(-rc);
  return -1;
}
__attribute__((always_inline)) inline long syscall_result(long rc) {
  if (__builtin_expect(static_cast<unsigned long>(rc) >= static_cast<unsigned long>(-4095L), 0))
    return syscall_failed(rc);
  return rc;
}

// The statistics path, out of line: the pass-through keeps no frame for it.
__attribute__((noinline)) long timed_syscall(uintptr_t ip, long number, long a1, long a2, long a3, long a4, long a5,
                                             long a6) {
  if (!is_futex_wait(number, a2) || in_own_text(ip)) return raw_syscall(number, a1, a2, a3, a4, a5, a6);
  const uint64_t t0 = arch::monotonic_ns();
  long rc = raw_syscall(number, a1, a2, a3, a4, a5, a6);
  record(Kind::futex, "syscall", ip, arch::monotonic_ns() - t0);
  return rc;
}

}  // namespace
}  // namespace lockswap::waits

// No noexcept, unlike glibc's declaration: a cancellation may unwind through
// it (see the top of the file). Six arguments are read whatever the caller
// passed, as glibc's does: on x86_64 the sixth is a word of the caller's
// stack that may lie outside any object (AddressSanitizer would call that an
// underflow; the value is never used by a call that takes fewer).
//
// On x86_64 and aarch64 the parameters are named, not `...`: there a
// variadic caller puts its integer arguments exactly where a call with seven
// named longs has them (x86_64: rdi, rsi, rdx, rcx, r8, r9, then the stack
// word above the return address; aarch64 Linux: x0 to x6), which is what
// glibc's assembly syscall() reads too. va_start would store the argument
// registers to a save area and va_arg load them back: the variadic
// pass-through was 31 instructions, this one is 16 (GCC 12, x86_64; glibc's
// own is 11). Every futex sleep and wake lockswap makes itself pays it, as
// those bind to this export (arch/futex.h). <unistd.h> declares syscall()
// variadic, so the definition has a C++ name of its own and "syscall" as
// its symbol name.
#if defined(__x86_64__) || defined(__aarch64__)
LOCKSWAP_EXPORT long lockswap_syscall_export(long number, long a1, long a2, long a3, long a4, long a5,
                                             long a6) __asm__("syscall");
LOCKSWAP_EXPORT __attribute__((no_sanitize("address"))) long lockswap_syscall_export(long number, long a1, long a2,
                                                                                    long a3, long a4, long a5,
                                                                                    long a6) {
  long rc;
  if (__builtin_expect(lockswap::waits::on(), 0))
    rc = lockswap::waits::timed_syscall(reinterpret_cast<uintptr_t>(__builtin_return_address(0)), number, a1, a2,
                                        a3, a4, a5, a6);
  else
    rc = lockswap::waits::raw_syscall(number, a1, a2, a3, a4, a5, a6);
  return lockswap::waits::syscall_result(rc);
}
#else
// Other ABIs may pass variadic arguments where named ones do not go.
LOCKSWAP_EXPORT __attribute__((no_sanitize("address"))) long syscall(long number, ...) {
  va_list ap;
  va_start(ap, number);
  long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long);
  long a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
  va_end(ap);
  long rc;
  if (__builtin_expect(lockswap::waits::on(), 0))
    rc = lockswap::waits::timed_syscall(reinterpret_cast<uintptr_t>(__builtin_return_address(0)), number, a1, a2,
                                        a3, a4, a5, a6);
  else
    rc = lockswap::waits::raw_syscall(number, a1, a2, a3, a4, a5, a6);
  return lockswap::waits::syscall_result(rc);
}
#endif
