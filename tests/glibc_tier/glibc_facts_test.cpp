// tests/glibc_tier/glibc_facts_test.cpp — every glibc fact lockswap relies on
// (preload/glibc_facts.h), checked against the glibc this program runs on,
// without lockswap loaded: on the host (glibc_facts, Debian 12's 2.36) and in
// the Debian 13 root (glibc241/glibc_facts with the host-built binary, and
// glibc241/glibc_facts_native compiled there against 2.41's own headers).
#include <dlfcn.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <sys/auxv.h>
#include <threads.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "arch/rseq.h"
#include "preload/abi.h"
#include "preload/glibc_facts.h"

namespace {

namespace abi = lockswap::abi;  // (not a using-directive: <cxxabi.h> defines ::abi)
namespace arch = lockswap::arch;
namespace glibc_facts = lockswap::glibc_facts;

// The layouts lockswap overlays were compiled against these headers.
static_assert(sizeof(pthread_mutex_t) == 40 && sizeof(pthread_rwlock_t) == 56 && sizeof(pthread_cond_t) == 48 &&
              sizeof(sem_t) == 32, "x86-64 glibc object sizes");

template <class T>
bool all_zero(const T& object) {
  static const T zero{};
  return std::memcmp(&object, &zero, sizeof(T)) == 0;
}

template <class Field, class T>
Field field_at(const T& object, std::size_t offset) {
  Field f;
  std::memcpy(&f, reinterpret_cast<const unsigned char*>(&object) + offset, sizeof f);
  return f;
}

TEST(GlibcFacts, RunningVersionIsChecked) {
  EXPECT_TRUE(glibc_facts::version_checked(gnu_get_libc_version())) << "glibc " << gnu_get_libc_version();
}

TEST(GlibcFacts, VersionDecision) {
  EXPECT_TRUE(glibc_facts::version_checked("2.36"));
  EXPECT_TRUE(glibc_facts::version_checked("2.41"));
  for (const char* v : {"2.35", "2.39", "2.40", "2.42", "2.41.9000", "2.4", "2.410", "2.36 ", "", "3.0"})
    EXPECT_FALSE(glibc_facts::version_checked(v)) << v;
}

TEST(GlibcFacts, StaticInitialisers) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  EXPECT_TRUE(all_zero(m));
  EXPECT_TRUE(all_zero(l));
  EXPECT_TRUE(all_zero(c));
  pthread_mutex_t recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
  pthread_mutex_t errorcheck = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
  pthread_mutex_t adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
  EXPECT_EQ(abi::obj(&recursive).kind.load(), abi::kKindRecursive);
  EXPECT_EQ(abi::obj(&errorcheck).kind.load(), abi::kKindErrorcheck);
  EXPECT_EQ(abi::obj(&adaptive).kind.load(), abi::kKindAdaptive);
  pthread_rwlock_t writer = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
  EXPECT_EQ(abi::obj(&writer).flags.load(), abi::kRwPreferWriterNonrecursive);
  abi::obj(&writer).flags.store(0);
  EXPECT_TRUE(all_zero(writer)) << "the writer-preferring initialiser sets more than __flags";
}

// The __kind glibc's pthread_mutex_init stores for one attribute setting.
int kind_after_init(const std::function<void(pthread_mutexattr_t*)>& set) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  set(&a);
  pthread_mutex_t m;
  std::memset(&m, 0xa5, sizeof m);
  EXPECT_EQ(pthread_mutex_init(&m, &a), 0);
  pthread_mutexattr_destroy(&a);
  int kind = abi::obj(&m).kind.load();
  pthread_mutex_destroy(&m);
  return kind;
}

TEST(GlibcFacts, MutexKinds) {
  using abi::kKindTypeMask;
  EXPECT_EQ(kind_after_init([](auto*) {}), abi::kKindNormal);
  EXPECT_EQ(kind_after_init([](auto* a) { pthread_mutexattr_settype(a, PTHREAD_MUTEX_RECURSIVE); }),
            abi::kKindRecursive);
  EXPECT_EQ(kind_after_init([](auto* a) { pthread_mutexattr_settype(a, PTHREAD_MUTEX_ERRORCHECK); }),
            abi::kKindErrorcheck);
  EXPECT_EQ(kind_after_init([](auto* a) { pthread_mutexattr_settype(a, PTHREAD_MUTEX_ADAPTIVE_NP); }),
            abi::kKindAdaptive);
  // glibc marks a robust mutex process-shared as well.
  EXPECT_EQ(kind_after_init([](auto* a) { pthread_mutexattr_setrobust(a, PTHREAD_MUTEX_ROBUST); }) & ~kKindTypeMask,
            abi::kKindRobust | abi::kKindPsharedBit);
  EXPECT_EQ(kind_after_init([](auto* a) { pthread_mutexattr_setprotocol(a, PTHREAD_PRIO_INHERIT); }) & ~kKindTypeMask,
            abi::kKindPrioInherit);
  EXPECT_EQ(kind_after_init([](auto* a) { pthread_mutexattr_setprotocol(a, PTHREAD_PRIO_PROTECT); }) &
                ~kKindTypeMask & abi::kKindGlibcOwned,
            abi::kKindPrioProtect);
  EXPECT_EQ(kind_after_init([](auto* a) { pthread_mutexattr_setpshared(a, PTHREAD_PROCESS_SHARED); }) & ~kKindTypeMask,
            abi::kKindPsharedBit);

  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  ASSERT_EQ(pthread_mutex_lock(&m), 0);
  EXPECT_EQ(abi::obj(&m).owner_tid.load(), gettid()) << "__owner";
  ASSERT_EQ(pthread_mutex_unlock(&m), 0);
  ASSERT_EQ(pthread_mutex_destroy(&m), 0);
  EXPECT_EQ(abi::obj(&m).kind.load(), abi::kKindDestroyed);
}

TEST(GlibcFacts, RwlockFields) {
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_t l;
  ASSERT_EQ(pthread_rwlock_init(&l, &a), 0);
  EXPECT_TRUE(abi::glibc_owned(abi::obj(&l))) << "__shared";
  EXPECT_EQ(abi::obj(&l).flags.load(), abi::kRwPreferWriterNonrecursive);
  pthread_rwlock_destroy(&l);
  pthread_rwlockattr_destroy(&a);

  pthread_rwlock_t w = PTHREAD_RWLOCK_INITIALIZER;
  EXPECT_FALSE(abi::glibc_owned(abi::obj(&w)));
  ASSERT_EQ(pthread_rwlock_wrlock(&w), 0);
  EXPECT_EQ(abi::obj(&w).writer_tid.load(), gettid()) << "__cur_writer";
  ASSERT_EQ(pthread_rwlock_unlock(&w), 0);
}

TEST(GlibcFacts, SemFields) {
  sem_t s;
  ASSERT_EQ(sem_init(&s, 0, 5), 0);
  EXPECT_EQ(field_at<uint32_t>(s, abi::kSemValueOffset), 5u);
  EXPECT_EQ(field_at<uint32_t>(s, abi::kSemValueOffset + 4), 0u) << "high half of the value word";
  EXPECT_EQ(field_at<int32_t>(s, abi::kSemPrivateOffset), 0);
  sem_destroy(&s);
  ASSERT_EQ(sem_init(&s, 1, 3), 0);
  EXPECT_EQ(field_at<int32_t>(s, abi::kSemPrivateOffset), abi::kSemSharedFlag);
  sem_destroy(&s);

  std::string name = "/lockswap_facts_" + std::to_string(getpid());
  sem_t* named = sem_open(name.c_str(), O_CREAT | O_EXCL, 0600, 7);
  ASSERT_NE(named, SEM_FAILED);
  sem_unlink(name.c_str());
  EXPECT_EQ(field_at<uint64_t>(*named, abi::kSemValueOffset), 7u) << "a fresh semaphore: value only";
  EXPECT_EQ(field_at<int32_t>(*named, abi::kSemPrivateOffset), abi::kSemSharedFlag);
  sem_close(named);
}

// The glibc functions lockswap forwards to are all reachable, and the
// condition variable's default version is the one real.cpp binds.
TEST(GlibcFacts, SymbolVersions) {
  for (const char* name :
       {"pthread_mutex_init", "pthread_mutex_clocklock", "pthread_mutex_consistent", "pthread_rwlock_clockrdlock",
        "pthread_rwlock_clockwrlock", "pthread_cond_clockwait", "sem_clockwait", "sem_getvalue", "pthread_setcanceltype",
        "mtx_timedlock", "cnd_timedwait"})
    EXPECT_NE(dlsym(RTLD_DEFAULT, name), nullptr) << name;
  for (const char* name : {"pthread_cond_init", "pthread_cond_destroy", "pthread_cond_wait", "pthread_cond_timedwait",
                           "pthread_cond_signal", "pthread_cond_broadcast"}) {
    void* current = dlvsym(RTLD_DEFAULT, name, "GLIBC_2.3.2");
    EXPECT_NE(current, nullptr) << name << "@GLIBC_2.3.2";
    EXPECT_EQ(current, dlsym(RTLD_DEFAULT, name)) << name << ": GLIBC_2.3.2 is not the default version";
    void* old = dlvsym(RTLD_DEFAULT, name, "GLIBC_2.2.5");
    EXPECT_NE(old, nullptr) << name << "@GLIBC_2.2.5";
    EXPECT_NE(old, current) << name << ": the old ABI is a distinct function";
  }
}

// glibc registered the rseq area lockswap reads, where arch/rseq.h reads it.
TEST(GlibcFacts, Rseq) {
  ASSERT_TRUE(arch::rseq_registered()) << "__rseq_size is 0 (GLIBC_TUNABLES=glibc.pthread.rseq=0?)";
  unsigned long feature_size = getauxval(AT_RSEQ_FEATURE_SIZE);
  std::string version = gnu_get_libc_version();
  if (version == "2.36") {
    EXPECT_EQ(__rseq_size, 20u) << "2.36 reports the fields it uses";
  } else if (version == "2.41" && feature_size != 0) {
    EXPECT_GE(__rseq_size, feature_size);
  }
  RecordProperty("rseq_size", static_cast<int>(__rseq_size));
  RecordProperty("feature_size", static_cast<int>(feature_size));
  bool agreed = false;
  for (int i = 0; i < 100 && !agreed; ++i) {
    int before = sched_getcpu();
    int seen = static_cast<int>(*arch::rseq_cpu_id_word());
    agreed = before == seen && sched_getcpu() == before;
  }
  EXPECT_TRUE(agreed) << "rseq cpu_id never matched sched_getcpu()";
  if (arch::kernel_mm_cid_available()) {
    int cid = arch::kernel_mm_cid();
    EXPECT_GE(cid, 0);
    EXPECT_LT(cid, static_cast<int>(sysconf(_SC_NPROCESSORS_CONF)));
  }
}

// ------------------------------------------------------ cancellation points

pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_held_mutex = PTHREAD_MUTEX_INITIALIZER;  // held by the test while probes run
pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
pthread_rwlock_t g_rwlock = PTHREAD_RWLOCK_INITIALIZER;
pthread_rwlock_t g_held_rwlock = PTHREAD_RWLOCK_INITIALIZER;  // write-held by the test
mtx_t g_mtx;
cnd_t g_cnd;
sem_t g_sem;

timespec soon(clockid_t clock = CLOCK_REALTIME) {
  timespec t;
  clock_gettime(clock, &t);
  t.tv_nsec += 20'000'000;
  if (t.tv_nsec >= 1'000'000'000) {
    t.tv_sec += 1;
    t.tv_nsec -= 1'000'000'000;
  }
  return t;
}

// Holds a mutex for a condition wait and releases it however the wait ends
// (a cancelled wait returns the mutex locked, then unwinds).
struct Held {
  explicit Held(pthread_mutex_t* m) : m_(m) { pthread_mutex_lock(m_); }
  ~Held() { pthread_mutex_unlock(m_); }
  pthread_mutex_t* m_;
};
struct HeldMtx {
  explicit HeldMtx(mtx_t* m) : m_(m) { mtx_lock(m_); }
  ~HeldMtx() { mtx_unlock(m_); }
  mtx_t* m_;
};

struct Probe {
  const char* name;
  bool blocks;     // the call waits (at most 20 ms): a free lock or unit is not there
  void (*call)();  // returns normally unless cancelled
};

// The semaphore is empty between probes; sem_post before a non-blocking
// wait gives it a unit (sem_post is no cancellation point: its own probe).
const Probe kProbes[] = {
    {"pthread_mutex_lock", false, [] { pthread_mutex_lock(&g_mutex), pthread_mutex_unlock(&g_mutex); }},
    {"pthread_mutex_trylock", false, [] { pthread_mutex_trylock(&g_mutex), pthread_mutex_unlock(&g_mutex); }},
    {"pthread_mutex_timedlock", true, [] { auto t = soon(); pthread_mutex_timedlock(&g_held_mutex, &t); }},
    {"pthread_mutex_clocklock", true,
     [] { auto t = soon(CLOCK_MONOTONIC); pthread_mutex_clocklock(&g_held_mutex, CLOCK_MONOTONIC, &t); }},
    {"pthread_rwlock_rdlock", false, [] { pthread_rwlock_rdlock(&g_rwlock), pthread_rwlock_unlock(&g_rwlock); }},
    {"pthread_rwlock_wrlock", false, [] { pthread_rwlock_wrlock(&g_rwlock), pthread_rwlock_unlock(&g_rwlock); }},
    {"pthread_rwlock_timedrdlock", true, [] { auto t = soon(); pthread_rwlock_timedrdlock(&g_held_rwlock, &t); }},
    {"pthread_rwlock_timedwrlock", true, [] { auto t = soon(); pthread_rwlock_timedwrlock(&g_held_rwlock, &t); }},
    {"pthread_rwlock_clockwrlock", true,
     [] { auto t = soon(CLOCK_MONOTONIC); pthread_rwlock_clockwrlock(&g_held_rwlock, CLOCK_MONOTONIC, &t); }},
    {"pthread_cond_timedwait", true, [] { auto t = soon(); Held h(&g_mutex); pthread_cond_timedwait(&g_cond, &g_mutex, &t); }},
    {"pthread_cond_clockwait", true,
     [] { auto t = soon(); Held h(&g_mutex); pthread_cond_clockwait(&g_cond, &g_mutex, CLOCK_REALTIME, &t); }},
    {"pthread_cond_signal", false, [] { pthread_cond_signal(&g_cond); }},
    {"pthread_cond_broadcast", false, [] { pthread_cond_broadcast(&g_cond); }},
    {"mtx_lock", false, [] { mtx_lock(&g_mtx), mtx_unlock(&g_mtx); }},
    {"mtx_timedlock", false, [] { auto t = soon(); mtx_timedlock(&g_mtx, &t), mtx_unlock(&g_mtx); }},
    {"cnd_timedwait", true, [] { auto t = soon(); HeldMtx h(&g_mtx); cnd_timedwait(&g_cnd, &g_mtx, &t); }},
    {"sem_wait", false, [] { sem_post(&g_sem), sem_wait(&g_sem); }},
    {"sem_timedwait", false, [] { auto t = soon(); sem_post(&g_sem), sem_timedwait(&g_sem, &t); }},
    {"sem_timedwait", true, [] { auto t = soon(); sem_timedwait(&g_sem, &t); }},
    {"sem_clockwait", false,
     [] { auto t = soon(CLOCK_MONOTONIC); sem_post(&g_sem), sem_clockwait(&g_sem, CLOCK_MONOTONIC, &t); }},
    {"sem_clockwait", true, [] { auto t = soon(CLOCK_MONOTONIC); sem_clockwait(&g_sem, CLOCK_MONOTONIC, &t); }},
    {"sem_trywait", false, [] { sem_post(&g_sem), sem_trywait(&g_sem); }},
    {"sem_post", false, [] { sem_post(&g_sem), sem_trywait(&g_sem); }},
};

// Runs the probe with a deferred cancellation request pending: true when
// the call acted on it.
bool acts_on_pending_cancel(const Probe& probe) {
  pthread_t t;
  pthread_create(
      &t, nullptr,
      [](void* p) -> void* {
        pthread_cancel(pthread_self());
        static_cast<const Probe*>(p)->call();
        return nullptr;
      },
      const_cast<Probe*>(&probe));
  void* result = nullptr;
  pthread_join(t, &result);
  while (sem_trywait(&g_sem) == 0) {}  // a cancelled wait leaves its unit behind
  return result == PTHREAD_CANCELED;
}

bool expected_to_act(const Probe& p) {
  if (p.blocks) return glibc_facts::listed(glibc_facts::kCancelsWhileWaiting, p.name);
  return glibc_facts::listed(glibc_facts::kCancelsBeforeWaiting, p.name);
}

TEST(GlibcFacts, CancellationPoints) {
  ASSERT_EQ(mtx_init(&g_mtx, mtx_timed), thrd_success);
  ASSERT_EQ(cnd_init(&g_cnd), thrd_success);
  ASSERT_EQ(sem_init(&g_sem, 0, 0), 0);
  ASSERT_EQ(pthread_mutex_lock(&g_held_mutex), 0);
  ASSERT_EQ(pthread_rwlock_wrlock(&g_held_rwlock), 0);
  for (const Probe& p : kProbes)
    EXPECT_EQ(acts_on_pending_cancel(p), expected_to_act(p)) << p.name << (p.blocks ? " (blocking)" : " (free)");
  pthread_rwlock_unlock(&g_held_rwlock);
  pthread_mutex_unlock(&g_held_mutex);

  // The waits without a deadline, with a waker in case they were not
  // cancellation points.
  std::atomic<bool> done{false};
  pthread_t waker;
  pthread_create(
      &waker, nullptr,
      [](void* d) -> void* {
        while (!static_cast<std::atomic<bool>*>(d)->load()) {
          usleep(20'000);
          pthread_cond_broadcast(&g_cond);
          cnd_broadcast(&g_cnd);
        }
        return nullptr;
      },
      &done);
  const Probe untimed[] = {
      {"pthread_cond_wait", true, [] { Held h(&g_mutex); pthread_cond_wait(&g_cond, &g_mutex); }},
      {"cnd_wait", true, [] { HeldMtx h(&g_mtx); cnd_wait(&g_cnd, &g_mtx); }},
  };
  for (const Probe& p : untimed) EXPECT_EQ(acts_on_pending_cancel(p), expected_to_act(p)) << p.name;
  done = true;
  pthread_join(waker, nullptr);
}


// abi::cancel_may_act() reads glibc's cancellation word inline; it must say
// "may act" exactly when glibc's pthread_testcancel() would act: never with
// no request or with cancellation disabled, and for a pending request once
// enabled (deferred type). Elsewhere than x86-64 it always says "may act".
struct CancelSteps {
  std::atomic<int> step{0};  // 1: the thread disabled cancellation; 2: cancelled
  bool fresh = true, disabled = true, enabled = false;
};

TEST(GlibcFacts, CancelHandling) {
  CancelSteps steps;
  pthread_t t;
  ASSERT_EQ(pthread_create(
                &t, nullptr,
                [](void* arg) -> void* {
                  auto& s = *static_cast<CancelSteps*>(arg);
                  s.fresh = abi::cancel_may_act();
                  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr);
                  s.step = 1;
                  while (s.step.load() != 2) sched_yield();
                  s.disabled = abi::cancel_may_act();
                  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, nullptr);  // deferred: does not act
                  s.enabled = abi::cancel_may_act();
                  pthread_testcancel();
                  return nullptr;
                },
                &steps),
            0);
  while (steps.step.load() != 1) sched_yield();
  ASSERT_EQ(pthread_cancel(t), 0);
  steps.step = 2;
  void* result = nullptr;
  ASSERT_EQ(pthread_join(t, &result), 0);
  EXPECT_EQ(result, PTHREAD_CANCELED) << "glibc's pthread_testcancel acted";
  EXPECT_TRUE(steps.enabled) << "a pending request, enabled";
#if defined(__x86_64__)
  EXPECT_FALSE(steps.fresh) << "no request";
  EXPECT_FALSE(steps.disabled) << "a pending request, cancellation disabled";
#else
  EXPECT_TRUE(steps.fresh && steps.disabled) << "no inline test here: always \"may act\"";
#endif
  EXPECT_FALSE(abi::cancel_may_act()) << "the main thread, never cancelled";
}

}  // namespace
