// Direct tests of the thread registry: compact recycled ids, type-stable slots.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <set>
#include <thread>
#include <vector>

#include "core/thread_registry.h"
#include "tests/core/core_test_util.h"

using namespace lockswap;

// This executable's pthread_setcancelstate (core code linked in calls it):
// glibc's, plus, when armed, a cancellation of the calling thread right after
// it disabled cancellation, as if another thread's pthread_cancel had come
// exactly then (for AsyncCancelArrivingWhileAttachingEndsItAsCancelled).
namespace {
std::atomic<bool> g_cancel_when_disabled{false};
}
extern "C" int pthread_setcancelstate(int state, int* old_state) {
  using Fn = int (*)(int, int*);
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_setcancelstate"));
  int rc = real(state, old_state);
  if (state == PTHREAD_CANCEL_DISABLE && g_cancel_when_disabled.exchange(false)) pthread_cancel(pthread_self());
  return rc;
}

// The registry's pause point: raises SIGUSR1 in the thread whose tid is
// armed, while that thread holds the registry lock.
namespace {
std::atomic<pid_t> g_raise_in_registry_for{0};
}
extern "C" void lockswap_test_pause_in_registry() {
  pid_t me = static_cast<pid_t>(syscall(SYS_gettid));
  pid_t armed = me;
  if (g_raise_in_registry_for.compare_exchange_strong(armed, 0)) raise(SIGUSR1);
}

TEST(ThreadRegistry, SlotIsStableWithinAThreadAndReachableById) {
  ThreadSlot& s = self_slot();
  EXPECT_EQ(&s, &self_slot());
  EXPECT_NE(s.id, 0u);
  EXPECT_EQ(slot_of(s.id), &s);
  EXPECT_EQ(s.tid, current_tid());
  EXPECT_FALSE(is_ghost(s));
}

// Ids of exited threads are reused, so the id space tracks live threads:
// 2000 short-lived threads, at most 4 alive at once, must not use 2000 ids.
TEST(ThreadRegistry, IdsOfExitedThreadsAreRecycled) {
  std::set<uint32_t> ids;
  for (int round = 0; round < 500; ++round) {
    std::vector<std::thread> ts;
    std::vector<uint32_t> got(4);
    for (int i = 0; i < 4; ++i) ts.emplace_back([&, i] { got[i] = self_slot().id; });
    for (auto& t : ts) t.join();
    ids.insert(got.begin(), got.end());
  }
  EXPECT_LE(ids.size(), 64u);
}

TEST(ThreadRegistry, EventsOfExitedThreadsStillCount) {
  uint64_t before = lockevent_total(LockEvent::cond_wait);
  std::thread([] { for (int i = 0; i < 10; ++i) lockevent_inc(LockEvent::cond_wait); }).join();
  EXPECT_EQ(lockevent_total(LockEvent::cond_wait) - before, 10u);
}

// The count of attached threads (the rwsem's handoff stretch reads it)
// follows threads in and out, and a fork child counts only itself.
TEST(ThreadRegistry, AttachedThreadsAreCountedInAndOut) {
  self_slot();
  const uint32_t before = thread_registry::g_attached_threads.load();
  constexpr int kThreads = 6;
  std::atomic<int> in{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i)
    ts.emplace_back([&] {
      self_slot();
      in.fetch_add(1);
      while (!release) std::this_thread::yield();
    });
  while (in.load() < kThreads) std::this_thread::yield();
  EXPECT_EQ(thread_registry::g_attached_threads.load(), before + kThreads);
  pid_t pid = fork();
  if (pid == 0) {
    after_fork_in_child();
    _exit(thread_registry::g_attached_threads.load() == 1 ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  release = true;
  for (auto& t : ts) t.join();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a fork child counts only the forking thread";
  EXPECT_EQ(thread_registry::g_attached_threads.load(), before);
}

TEST(ThreadRegistry, OtherThreadsBecomeGhostsInAForkChild) {
  std::atomic<ThreadSlot*> other_slot{nullptr};
  std::atomic<bool> release{false};
  std::thread t([&] {
    other_slot = &self_slot();
    while (!release) std::this_thread::yield();
  });
  while (other_slot.load() == nullptr) std::this_thread::yield();
  ThreadSlot* other = other_slot.load();
  ThreadSlot& me = self_slot();
  pid_t pid = fork();
  if (pid == 0) {
    after_fork_in_child();  // what preload's atfork handler does
    bool ok = is_ghost(*other) && !is_ghost(me) && me.tid == getpid() && current_tid() == getpid();
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  release = true;
  t.join();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(is_ghost(*other));
}

// No slot to be had (address space exhausted): the thread shares one static
// slot instead of exiting, keeps it, and its events still count.
TEST(ThreadRegistry, ThreadWithoutASlotSharesOneAndItsEventsCount) {
  using lockswap::coretest::RefuseNewSlots;
  uint64_t shared_before = lockevent_total(LockEvent::registry_shared_slot);
  uint64_t waits_before = lockevent_total(LockEvent::cond_wait);
  {
    RefuseNewSlots refuse;
    std::vector<std::thread> ts;
    std::atomic<int> shared{0};
    for (int i = 0; i < 4; ++i)
      ts.emplace_back([&] {
        ThreadSlot& s = self_slot();
        if (is_shared(s) && &self_slot() == &s && slot_of(s.id) == &s && !is_ghost(s)) shared.fetch_add(1);
        for (int k = 0; k < 1000; ++k) lockevent_inc(LockEvent::cond_wait);
      });
    for (auto& t : ts) t.join();
    EXPECT_EQ(shared.load(), 4);
  }
  if (LOCKSWAP_LOCK_EVENTS) {
    EXPECT_EQ(lockevent_total(LockEvent::registry_shared_slot) - shared_before, 4u);
    EXPECT_EQ(lockevent_total(LockEvent::cond_wait) - waits_before, 4000u) << "shared counters add atomically";
  }
  // Slots are handed out again afterwards.
  bool own = false;
  std::thread([&] { own = !is_shared(self_slot()); }).join();
  EXPECT_TRUE(own);
}

// unpark() of the shared slot wakes every thread parked on it.
TEST(ThreadRegistry, UnparkOfTheSharedSlotWakesEverySleeper) {
  ThreadSlot& s = thread_registry::g_shared_slot;
  std::atomic<int> woken{0};
  std::vector<std::thread> ts;
  std::atomic<int> parked{0};
  uint32_t seen = s.park.load();
  for (int i = 0; i < 3; ++i)
    ts.emplace_back([&] {
      parked.fetch_add(1);
      while (s.park.load() == seen) syscall(SYS_futex, &s.park, FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
      woken.fetch_add(1);
    });
  while (parked.load() != 3) std::this_thread::yield();
  unpark(s);
  for (auto& t : ts) t.join();
  EXPECT_EQ(woken.load(), 3);
}

// A thread of the asynchronous type attaches on its first lock call, with
// cancellation disabled meanwhile; a cancellation that arrives then must end
// the thread, once attached, as glibc ends a cancelled thread: cleanup run,
// exit value PTHREAD_CANCELED. (glibc 2.36's pthread_setcancelstate acts on
// it without setting the exit value: the thread ended with NULL.)
TEST(ThreadRegistry, AsyncCancelArrivingWhileAttachingEndsItAsCancelled) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan fails its own stack-frame check (asan_thread.cpp) on a cancellation's unwind";
#endif
  static std::atomic<bool> cleanup_ran{false}, attached{false};
  cleanup_ran = false;
  auto body = [](void*) -> void* {
    pthread_cleanup_push([](void*) { cleanup_ran = true; }, nullptr);
    int old_type;
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &old_type);
    g_cancel_when_disabled = true;
    self_slot();  // a fresh thread: attaches
    attached = true;
    pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &old_type);
    pthread_cleanup_pop(0);
    return nullptr;
  };
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, nullptr, body, nullptr), 0);
  void* result = nullptr;
  ASSERT_EQ(pthread_join(t, &result), 0);
  EXPECT_FALSE(g_cancel_when_disabled.load()) << "attaching did not disable cancellation";
  EXPECT_EQ(result, PTHREAD_CANCELED);
  EXPECT_TRUE(cleanup_ran.load());
  EXPECT_FALSE(attached.load()) << "the thread ran on with a cancellation pending and the asynchronous type";
}

// A signal handler may call what counts lock events or takes ids (sem_post,
// a switch-model poll) at any instruction, including while its thread holds
// the registry lock to register or to give its slot back. The handler must
// neither wait for that lock (its own thread holds it) nor register half-way:
// it runs once the registration or the exit is whole, and sees the slot.
namespace {
std::atomic<ThreadSlot*> g_handler_saw{nullptr};
void look_up_slot_in_handler(int) {
  lockevent_inc(LockEvent::cond_wait);
  g_handler_saw = &self_slot();
}

// Runs `body` on a fresh thread with the handler installed; false (after
// saying so) if the thread does not end within the limit.
bool thread_ends_with_registry_signal(void* (*body)(void*)) {
  struct sigaction sa {}, old {};
  sa.sa_handler = look_up_slot_in_handler;
  sigemptyset(&sa.sa_mask);
  EXPECT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  g_handler_saw = nullptr;
  std::atomic<bool> ended{false};
  pthread_t t;
  EXPECT_EQ(pthread_create(&t, nullptr, body, &ended), 0);
  if (!coretest::eventually([&] { return ended.load(); })) return false;
  pthread_join(t, nullptr);
  sigaction(SIGUSR1, &old, nullptr);
  return true;
}

void hung_on_the_registry() {  // the thread waits for itself: nothing can end it
  fprintf(stderr, "a signal handler waits for the registry lock its own thread holds\n");
  _exit(1);
}
}  // namespace

TEST(ThreadRegistrySignals, HandlerDuringRegistrationSeesTheWholeSlot) {
  static std::atomic<ThreadSlot*> attached{nullptr};
  bool ended = thread_ends_with_registry_signal([](void* ended) -> void* {
    g_raise_in_registry_for = static_cast<pid_t>(syscall(SYS_gettid));
    attached = &self_slot();
    static_cast<std::atomic<bool>*>(ended)->store(true);
    return nullptr;
  });
  if (!ended) hung_on_the_registry();
  EXPECT_EQ(g_raise_in_registry_for.load(), 0) << "the pause point never fired";
  EXPECT_NE(attached.load(), nullptr);
  EXPECT_EQ(g_handler_saw.load(), attached.load()) << "the handler registered a slot of its own";
}

TEST(ThreadRegistrySignals, HandlerDuringExitCountsOnTheSharedSlot) {
  struct sigaction sa {}, old {};
  sa.sa_handler = look_up_slot_in_handler;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  g_handler_saw = nullptr;
  uint64_t before = lockevent_total(LockEvent::cond_wait);
  pthread_t t;
  ASSERT_EQ(pthread_create(
                &t, nullptr,
                [](void*) -> void* {
                  self_slot();
                  g_raise_in_registry_for = static_cast<pid_t>(syscall(SYS_gettid));  // fires in its exit
                  return nullptr;
                },
                nullptr),
            0);
  if (!coretest::eventually([&] { return g_handler_saw.load() != nullptr; })) hung_on_the_registry();
  pthread_join(t, nullptr);
  sigaction(SIGUSR1, &old, nullptr);
  EXPECT_EQ(g_raise_in_registry_for.load(), 0) << "the pause point never fired";
  EXPECT_TRUE(is_shared(*g_handler_saw.load())) << "the exiting thread registered again";
  EXPECT_EQ(lockevent_total(LockEvent::cond_wait), before + 1);
}
