// preload/self_check.cpp — the start-up check of the glibc facts the fast
// paths read (see self_check.h; the facts: preload/glibc_facts.h).
//
// Every check runs on the calling thread: a second thread would cost tens of
// microseconds, allocate (its TLS vector) and switch glibc out of its
// single-threaded mode for the life of the process. So the cancellation
// word's DISABLE bit is checked here, its CANCELED/EXITING/TERMINATED bits
// only by tests/glibc_tier/glibc_facts_test.cpp (they need a thread that is
// cancelled). Objects are made and changed by glibc's own functions (the
// interposed ones through preload/real.h), then read through preload/abi.h,
// as the fast paths read them.
#include "preload/self_check.h"

#include <gnu/libc-version.h>
#include <pthread.h>
#include <semaphore.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "arch/rseq.h"
#include "core/cid.h"
#include "preload/abi.h"
#include "preload/diag.h"
#include "preload/real.h"

// Test hook, defined only by a test library preloaded in front of lockswap
// (tests/glibc_tier/self_check_hook.c): called with each fact's name before
// its check and with nullptr once all have passed; non-zero makes that
// fact's check expect a wrong value. Not hidden, so that another object can
// define it; null everywhere else. It can only make a program stop.
extern "C" int lockswap_test_self_check(const char* fact) __attribute__((weak));

namespace lockswap::self_check {
namespace {

// What the test hook's fault does to an expected value: any change will do.
constexpr uint64_t kFaultFlip = 1;
// Reads of the rseq cpu_id that may disagree with getcpu(2) because the
// thread migrated between them, before the disagreement counts.
constexpr int kCpuTries = 4;
// Fills an object before glibc initialises it, so that bytes the
// initialiser did not write show.
constexpr int kPoison = 0xa5;

void say_hex(uint64_t v) {
  char text[2 + 16];
  size_t n = sizeof text;
  do {
    text[--n] = "0123456789abcdef"[v & 0xf];
    v >>= 4;
  } while (v != 0);
  text[--n] = 'x';
  text[--n] = '0';
  diag(text + n, sizeof text - n);
}

// glibc's own string, but shown as config.cpp shows text it did not write:
// printable ASCII only, at most kVersionMax bytes.
constexpr size_t kVersionMax = 32;
void say_version() {
  char text[kVersionMax];
  const char* v = gnu_get_libc_version();
  size_t n = 0;
  for (; n < kVersionMax && v[n] != '\0'; ++n) text[n] = v[n] >= 0x20 && v[n] < 0x7f ? v[n] : '?';
  diag(text, n);
}

[[noreturn]] void refuse(const char* fact, const char* what, uint64_t seen, uint64_t expected) {
  diag("lockswap: glibc ");
  say_version();
  diag(" does not behave as lockswap's fast paths expect. Fact ");
  diag(fact);
  diag(": ");
  diag(what);
  diag(": read ");
  say_hex(seen);
  diag(", expected ");
  say_hex(expected);
  diag(".\n  lockswap's locks read and write glibc's objects and thread data where this was found wrong:\n"
       "  they could corrupt locks or miss cancellations, so the program stops before main (no setting\n"
       "  overrides this). Run it without lockswap (take liblockswap.so out of LD_PRELOAD or\n"
       "  /etc/ld.so.preload) and check this glibc with lockswap's glibc tier (docs/glibc-versions.md).\n");
  _exit(2);
}

// One fact's comparisons; the first that differs refuses.
class Fact {
 public:
  explicit Fact(const char* name)
      : name_(name), fault_(lockswap_test_self_check != nullptr && lockswap_test_self_check(name) != 0) {}

  void same(const char* what, uint64_t seen, uint64_t expected) const {
    if (fault_) expected ^= kFaultFlip;
    if (seen != expected) refuse(name_, what, seen, expected);
  }
  void holds(const char* what, bool seen) const { same(what, seen, true); }

 private:
  const char* name_;
  bool fault_;
};

template <class T>
bool all_zero(const T& object) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(&object);
  for (size_t i = 0; i < sizeof(T); ++i)
    if (bytes[i] != 0) return false;
  return true;
}

template <class Field, class T>
Field field_at(const T& object, size_t offset) {
  Field f;
  memcpy(&f, reinterpret_cast<const unsigned char*>(&object) + offset, sizeof f);
  return f;
}

// ------------------------------------------------- the thread's own data

#if defined(__x86_64__)
// The word abi::cancel_may_act() reads, read the same way.
unsigned cancel_word() {
  const auto* self = static_cast<const char*>(__builtin_thread_pointer());
  const auto* word = reinterpret_cast<const int*>(self + abi::kCancelHandlingOffset);
  return static_cast<unsigned>(__atomic_load_n(word, __ATOMIC_RELAXED));
}
#endif

// x86-64 keeps struct pthread at the thread pointer: pthread_self() is it.
void check_thread_pointer() {
#if defined(__x86_64__)
  Fact f("thread_pointer");
  f.same("pthread_self() against the thread pointer", reinterpret_cast<uintptr_t>(pthread_self()),
         reinterpret_cast<uintptr_t>(__builtin_thread_pointer()));
#endif
}

// pthread_setcancelstate() sets and clears the DISABLE bit in the word at
// the thread pointer + 0x308. A state already disabled is left so: enabling
// it, even for a moment, could act on a pending request.
void check_cancel_word() {
#if defined(__x86_64__)
  Fact f("cancel_word");
  int old = PTHREAD_CANCEL_ENABLE;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  f.same("DISABLE bit at thread pointer + 0x308 after pthread_setcancelstate(DISABLE)",
         cancel_word() & abi::kCancelStateDisabled, abi::kCancelStateDisabled);
  if (old == PTHREAD_CANCEL_DISABLE) return;
  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, nullptr);
  f.same("DISABLE bit at thread pointer + 0x308 after pthread_setcancelstate(ENABLE)",
         cancel_word() & abi::kCancelStateDisabled, 0);
#endif
}

// ------------------------------------------------------------- mutexes

using SetAttr = void (*)(pthread_mutexattr_t*);

// __kind as glibc's pthread_mutex_init leaves it for one attribute setting
// (its lock elision hint bits, which glibc may add, masked off).
int kind_after_init(SetAttr set) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  set(&a);
  pthread_mutex_t m;
  memset(&m, kPoison, sizeof m);
  real::glibc().pthread_mutex_init(&m, &a);
  pthread_mutexattr_destroy(&a);
  int kind = abi::obj(&m).kind.load(std::memory_order_relaxed);
  real::glibc().pthread_mutex_destroy(&m);
  return kind & ~abi::kKindElisionBits;
}

struct KindCase {
  const char* what;
  SetAttr set;
  int mask;    // the bits compared
  int expect;  // their value
};

constexpr int kAllKindBits = ~0;

// The __kind values lockswap decides by (abi.h): the type, and the bits that
// hand an object to glibc. Robust mutexes carry the process-shared bit too,
// hence the masks. Not the priority-protect bit: glibc's init asks the
// kernel for the SCHED_FIFO range first (two system calls, about 13 us of a
// cold start-up); glibc_facts_test checks it.
const KindCase kKindCases[] = {
    {"__kind @16 of a default mutex", [](pthread_mutexattr_t*) {}, kAllKindBits, abi::kKindNormal},
    {"__kind @16 of a recursive mutex", [](pthread_mutexattr_t* a) { pthread_mutexattr_settype(a, PTHREAD_MUTEX_RECURSIVE); },
     kAllKindBits, abi::kKindRecursive},
    {"__kind @16 of an error-checking mutex",
     [](pthread_mutexattr_t* a) { pthread_mutexattr_settype(a, PTHREAD_MUTEX_ERRORCHECK); }, kAllKindBits,
     abi::kKindErrorcheck},
    {"__kind @16 of an adaptive mutex",
     [](pthread_mutexattr_t* a) { pthread_mutexattr_settype(a, PTHREAD_MUTEX_ADAPTIVE_NP); }, kAllKindBits,
     abi::kKindAdaptive},
    {"robust bit of __kind", [](pthread_mutexattr_t* a) { pthread_mutexattr_setrobust(a, PTHREAD_MUTEX_ROBUST); },
     abi::kKindRobust, abi::kKindRobust},
    {"priority-inherit bit of __kind",
     [](pthread_mutexattr_t* a) { pthread_mutexattr_setprotocol(a, PTHREAD_PRIO_INHERIT); }, abi::kKindGlibcOwned,
     abi::kKindPrioInherit},
    {"process-shared bit of __kind",
     [](pthread_mutexattr_t* a) { pthread_mutexattr_setpshared(a, PTHREAD_PROCESS_SHARED); }, abi::kKindGlibcOwned,
     abi::kKindPsharedBit},
};

void check_mutex_kind() {
  Fact f("mutex_kind");
  for (const KindCase& c : kKindCases) {
    int kind = kind_after_init(c.set);
    f.same(c.what, static_cast<uint32_t>(kind & c.mask), static_cast<uint32_t>(c.expect));
    // LOCKSWAP_SELECT keeps its tags there (abi.h).
    f.same("__kind bits 10..13 (selection tags)", static_cast<uint32_t>(kind & abi::kKindTagMask), 0);
  }
  pthread_mutex_t m;
  real::glibc().pthread_mutex_init(&m, nullptr);
  real::glibc().pthread_mutex_destroy(&m);
  f.same("__kind @16 after pthread_mutex_destroy", static_cast<uint32_t>(abi::obj(&m).kind.load()),
         static_cast<uint32_t>(abi::kKindDestroyed));
}

void check_mutex_owner() {
  Fact f("mutex_owner");
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  real::glibc().pthread_mutex_lock(&m);
  int owner = abi::obj(&m).owner_tid.load(std::memory_order_relaxed);
  real::glibc().pthread_mutex_unlock(&m);
  f.same("__owner @8 of a locked mutex against gettid()", static_cast<uint32_t>(owner),
         static_cast<uint32_t>(gettid()));
  f.same("__owner @8 once unlocked", static_cast<uint32_t>(abi::obj(&m).owner_tid.load()), 0);
}

// --------------------------------------------------- rwlocks, semaphores

void check_rwlock_fields() {
  Fact f("rwlock_fields");
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_t l;
  real::glibc().pthread_rwlock_init(&l, &a);
  pthread_rwlockattr_destroy(&a);
  f.same("__shared @28 of a process-shared rwlock", abi::glibc_owned(abi::obj(&l)), true);
  f.same("__flags @48 of a writer-preferring rwlock", abi::obj(&l).flags.load(), abi::kRwPreferWriterNonrecursive);
  real::glibc().pthread_rwlock_destroy(&l);

  pthread_rwlock_t w = PTHREAD_RWLOCK_INITIALIZER;
  real::glibc().pthread_rwlock_wrlock(&w);
  int writer = abi::obj(&w).writer_tid.load(std::memory_order_relaxed);
  real::glibc().pthread_rwlock_unlock(&w);
  f.same("__cur_writer @24 of a write-locked rwlock against gettid()", static_cast<uint32_t>(writer),
         static_cast<uint32_t>(gettid()));
  f.same("__shared @28 of a private rwlock", abi::glibc_owned(abi::obj(&w)), false);
}

// sem_init leaves the value alone in the low half of the 64-bit word and
// `private` 0 (private) or 128 (process-shared).
void check_sem(const Fact& f, int pshared, unsigned value, int32_t expect_private) {
  sem_t s;
  memset(&s, kPoison, sizeof s);
  real::glibc().sem_init(&s, pshared, value);
  f.same(pshared ? "value word @0 of a process-shared semaphore" : "value word @0 of a private semaphore",
         field_at<uint64_t>(s, abi::kSemValueOffset), value);
  f.same(pshared ? "private @8 of a process-shared semaphore" : "private @8 of a private semaphore",
         static_cast<uint32_t>(field_at<int32_t>(s, abi::kSemPrivateOffset)), static_cast<uint32_t>(expect_private));
  real::glibc().sem_destroy(&s);
}

void check_sem_fields() {
  Fact f("sem_fields");
  constexpr unsigned kPrivateValue = 5, kSharedValue = 3;
  check_sem(f, 0, kPrivateValue, 0);
  check_sem(f, 1, kSharedValue, abi::kSemSharedFlag);
}

// All-zero bytes are an unlocked default object to glibc as to lockswap:
// glibc's default initialisation writes nothing else, and the initialisers
// lockswap was compiled with are zeros.
void check_zero_init() {
  Fact f("zero_init");
  static const pthread_mutex_t kMutex = PTHREAD_MUTEX_INITIALIZER;
  static const pthread_rwlock_t kRwlock = PTHREAD_RWLOCK_INITIALIZER;
  static const pthread_cond_t kCond = PTHREAD_COND_INITIALIZER;
  f.holds("PTHREAD_{MUTEX,RWLOCK,COND}_INITIALIZER all-zero", all_zero(kMutex) && all_zero(kRwlock) && all_zero(kCond));
  pthread_mutex_t m;
  memset(&m, kPoison, sizeof m);
  real::glibc().pthread_mutex_init(&m, nullptr);
  f.holds("pthread_mutex_init(m, NULL) leaves all-zero bytes", all_zero(m));
  real::glibc().pthread_mutex_destroy(&m);
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlock_t l;
  memset(&l, kPoison, sizeof l);
  real::glibc().pthread_rwlock_init(&l, &a);
  f.holds("pthread_rwlock_init() with default attributes leaves all-zero bytes", all_zero(l));
  real::glibc().pthread_rwlock_destroy(&l);
  pthread_cond_t c;
  memset(&c, kPoison, sizeof c);
  real::glibc().pthread_cond_init(&c, nullptr);
  f.holds("pthread_cond_init(c, NULL) leaves all-zero bytes", all_zero(c));
  real::glibc().pthread_cond_destroy(&c);
}

// ---------------------------------------------------------------- rseq

// arch/rseq.h's cpu_id agrees with the kernel's getcpu(2) (the thread may
// move between the reads: a few tries), and the mm_cid word holds an id.
// Without a registered area the fast paths do not read it.
void check_rseq() {
  if (!arch::rseq_registered()) return;
  Fact f("rseq");
  uint32_t rseq_cpu = 0, cpu = 0;
  for (int i = 0; i < kCpuTries; ++i) {
    rseq_cpu = *arch::rseq_cpu_id_word();
    unsigned got = 0;
    syscall(SYS_getcpu, &got, nullptr, nullptr);  // not sched_getcpu(): it reads the rseq area itself
    cpu = got;
    if (rseq_cpu == cpu && *arch::rseq_cpu_id_word() == cpu) break;
  }
  f.same("cpu_id @4 of the rseq area against getcpu(2)", rseq_cpu, cpu);
  if (arch::kernel_mm_cid_available())
    f.holds("mm_cid @24 of the rseq area below the id space", *arch::rseq_mm_cid_word() < cid::kMaxCids);
}

}  // namespace

void refuse_if_glibc_differs() {
  check_thread_pointer();
  check_cancel_word();
  check_mutex_kind();
  check_mutex_owner();
  check_rwlock_fields();
  check_sem_fields();
  check_zero_init();
  check_rseq();
  if (lockswap_test_self_check != nullptr) lockswap_test_self_check(nullptr);
}

}  // namespace lockswap::self_check
