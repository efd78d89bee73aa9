#include "core/thread_registry.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "arch/futex.h"
#include "arch/relax.h"
#include "arch/rseq.h"
#include "core/cancel.h"
#include "core/oncpu.h"
#include "core/signals_blocked.h"
#include "core/spin_guard.h"

namespace lockswap {

__thread ThreadLocal t_local __attribute__((tls_model("initial-exec"))) = {nullptr, 0, 0, nullptr};

namespace thread_registry {
std::atomic<ThreadSlot*> g_chunks[kChunks];
std::atomic<uint32_t> g_fork_generation{0};
constinit ThreadSlot g_shared_slot{kSharedSlotId};

namespace {
// Registry lock (SpinGuard: yields, because under oversubscription its
// holder may be preempted).
std::atomic<uint32_t> g_lock{0};
uint32_t g_next_id = 1;                 // next never-used id (under g_lock)
ThreadSlot* g_free = nullptr;           // recycled slots (under g_lock)
std::atomic<bool> g_key_ready{false};
pthread_key_t g_exit_key;
// The exit key's value lives in the thread's own descriptor, so recording it
// never allocates (see the header); false until the key exists.
std::atomic<bool> g_key_inline{false};
std::atomic<bool> g_refuse_for_testing{false};

// The registry lock is not re-entrant, so no signal handler may run on its
// holder's thread: a handler's sem_post or switch-model poll can reach it.
struct RegistryGuard {
  SignalsBlocked no_handlers;
  SpinGuard lock{g_lock};
};

ThreadSlot* map_chunk() {
  if (g_refuse_for_testing.load(std::memory_order_relaxed)) return nullptr;
  void* p = mmap(nullptr, sizeof(ThreadSlot) * kSlotsPerChunk, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<ThreadSlot*>(p);
}

// Chunk `c` mapped (registry lock held, or single-threaded); false if it could not be.
bool ensure_chunk_locked(uint32_t c) {
  auto& chunk = g_chunks[c];
  if (chunk.load(std::memory_order_relaxed) != nullptr) return true;
  ThreadSlot* base = map_chunk();
  if (base == nullptr) return false;
  chunk.store(base, std::memory_order_release);
  return true;
}

void on_thread_exit(void* arg) {
  auto* s = static_cast<ThreadSlot*>(arg);
  SignalsBlocked no_handlers;  // a handler's lock call must not find the slot half given back
  if (void (*hook)() = g_thread_exit_hook.load(std::memory_order_relaxed)) hook();
  // What the thread still does (later destructors, a signal handler) counts
  // on the shared slot: attaching again would record the key again, and a
  // key recorded while destructors run may be left behind unrun.
  if (t_local.slot == s) t_local.slot = &g_shared_slot;
  // Retract the rseq pointer and wait out anyone dereferencing it: the rseq
  // area lives in this thread's TCB, which may be unmapped after we exit.
  s->cpu_word.store(nullptr, std::memory_order_seq_cst);
  while (s->peekers.load(std::memory_order_seq_cst) != 0) sched_yield();
  s->blocked.store(0, std::memory_order_relaxed);
  g_attached_threads.fetch_sub(1, std::memory_order_relaxed);
  RegistryGuard g;
  if (lockswap_test_pause_in_registry) lockswap_test_pause_in_registry();
  s->next_free = g_free;
  g_free = s;
}

// A recycled slot, else the next never-used one; nullptr when neither exists
// (4M live threads, or no memory for its chunk). A fresh slot in the middle of
// its chunk maps the next chunk ahead, while memory is likely still there.
ThreadSlot* take_slot() {
  RegistryGuard g;
  if (lockswap_test_pause_in_registry) lockswap_test_pause_in_registry();
  if (g_refuse_for_testing.load(std::memory_order_relaxed)) return nullptr;
  if (ThreadSlot* s = g_free) {
    g_free = s->next_free;
    return s;
  }
  if (g_next_id > kMaxThreads) return nullptr;
  uint32_t i = g_next_id - 1;
  uint32_t c = i >> kSlotsPerChunkShift;
  if (!ensure_chunk_locked(c)) return nullptr;
  if ((i & (kSlotsPerChunk - 1)) == kSlotsPerChunk / 2 && c + 1 < kChunks) (void)ensure_chunk_locked(c + 1);
  ThreadSlot* s = &g_chunks[c].load(std::memory_order_relaxed)[i & (kSlotsPerChunk - 1)];
  s->id = g_next_id++;
  return s;
}

void give_back(ThreadSlot* s) {
  RegistryGuard g;
  s->next_free = g_free;
  g_free = s;
}

// Made by the constructor, before main, while the program has few keys;
// here too for a lock call that comes before the constructor (another
// library's). pthread_key_create itself allocates nothing.
void ensure_exit_key() {
  if (g_key_ready.load(std::memory_order_acquire)) return;
  RegistryGuard g;
  if (!g_key_ready.load(std::memory_order_relaxed)) {
    bool made = pthread_key_create(&g_exit_key, on_thread_exit) == 0;
    g_key_inline.store(made && g_exit_key < kInlineKeys, std::memory_order_relaxed);
    g_key_ready.store(true, std::memory_order_release);
  }
}
}  // namespace

static ThreadSlot& attach_without_handlers();

ThreadSlot& attach_current_thread() {
  // Not even an asynchronous cancellation may end a thread here: it would
  // die holding the registry lock, and every later thread would spin on it.
  // The type goes deferred before the state is disabled and comes back after
  // it is enabled again: glibc (2.36) acts on an asynchronous cancellation
  // that arrived meanwhile inside pthread_setcancelstate without setting the
  // exit value, so the thread would end with NULL instead of
  // PTHREAD_CANCELED; pthread_setcanceltype sets it (docs/glibc-versions.md,
  // "pthread_setcancelstate leaves the exit value unset").
  int old_type, old_state;
  cancel::set_type(PTHREAD_CANCEL_DEFERRED, &old_type);
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old_state);
  ThreadSlot& s = attach_without_handlers();
  pthread_setcancelstate(old_state, &old_state);
  if (old_type != PTHREAD_CANCEL_DEFERRED) cancel::set_type(old_type, &old_type);
  return s;
}

// No slot of its own: the thread shares g_shared_slot until it exits (see the
// header). The shared slot's own fields are never written here.
static ThreadSlot& attach_shared() {
  t_local.slot = &g_shared_slot;
  lockevent_inc(LockEvent::registry_shared_slot);
  return g_shared_slot;
}

static ThreadSlot& attach_unseen();

// Registration runs whole or not at all as far as a signal handler on this
// thread can see: a handler that came before the block and attached the
// thread itself leaves nothing to do here.
static ThreadSlot& attach_without_handlers() {
  SignalsBlocked no_handlers;
  if (ThreadSlot* s = t_local.slot) return *s;
  return attach_unseen();
}

static ThreadSlot& attach_unseen() {
  ensure_exit_key();
  // The exit destructor is what recycles the slot. A key past glibc's inline
  // ones would allocate when recorded, and a lock path never allocates: then
  // every thread shares the one slot.
  if (!g_key_inline.load(std::memory_order_relaxed)) return attach_shared();
  ThreadSlot* s = take_slot();
  if (s == nullptr) return attach_shared();
  if (pthread_setspecific(g_exit_key, s) != 0) {
    give_back(s);
    return attach_shared();
  }
  g_attached_threads.fetch_add(1, std::memory_order_relaxed);
  s->tid = current_tid();
  s->generation.store(g_fork_generation.load(std::memory_order_relaxed), std::memory_order_relaxed);
  s->cpu_word.store(arch::rseq_cpu_id_word(), std::memory_order_release);
  s->event_mode = 0;  // its last owner may have died counting apart
  if (s->apart_pending) {
    for (auto& a : s->apart) a.store(0, std::memory_order_relaxed);
    s->apart_pending = false;
  }
  t_local.slot = s;
  return *s;
}

void reserve() {
  RegistryGuard g;
  (void)ensure_chunk_locked(0);
}

void refuse_new_slots_for_testing(bool refuse) { g_refuse_for_testing.store(refuse, std::memory_order_relaxed); }

namespace {
// Chunk 0 before main, so a program that lowers RLIMIT_AS or runs out of
// memory later still finds slots for its first 1024 live threads; the exit
// key before main, while it can still be one of glibc's inline keys.
__attribute__((constructor)) void reserve_at_load() {
  reserve();
  ensure_exit_key();
}
}  // namespace
}  // namespace thread_registry

int32_t current_tid_slow() {
  int32_t t = static_cast<int32_t>(syscall(SYS_gettid));
  t_local.tid = t;
  return t;
}

bool may_be_running(ThreadSlot& s) {
  if (s.blocked.load(std::memory_order_relaxed) != 0) return false;
  if (oncpu::source() == oncpu::Source::bpf) {
    // Exact where known; a stale tid (slot reused meanwhile) costs a hint.
    oncpu::State st = oncpu::state_of(s.tid);
    if (st != oncpu::State::unknown) return st == oncpu::State::running;
  }
  bool running = true;
  s.peekers.fetch_add(1, std::memory_order_seq_cst);
  if (const volatile uint32_t* w = s.cpu_word.load(std::memory_order_seq_cst)) {
    int owner_cpu = static_cast<int>(*w);
    running = owner_cpu < 0 || owner_cpu != arch::current_cpu();
  }
  s.peekers.fetch_sub(1, std::memory_order_release);
  return running;
}

void unpark(ThreadSlot& s) {
  s.park.fetch_add(1, std::memory_order_release);
  arch::futex_wake(&s.park, is_shared(s) ? arch::futex_wake_all : 1);
}

namespace {
// Calls fn(slot) for the shared slot and every slot ever mapped (live, exited
// and recycled).
template <class Fn>
void for_each_mapped_slot(Fn&& fn) {
  fn(thread_registry::g_shared_slot);
  for (auto& chunk_ptr : thread_registry::g_chunks) {
    ThreadSlot* chunk = chunk_ptr.load(std::memory_order_acquire);
    if (chunk == nullptr) break;
    for (uint32_t i = 0; i < thread_registry::kSlotsPerChunk; ++i) fn(chunk[i]);
  }
}
}  // namespace

uint64_t lockevent_total(LockEvent ev) {
  uint64_t sum = 0;
  for_each_mapped_slot(
      [&](ThreadSlot& s) { sum += s.events[static_cast<uint32_t>(ev)].load(std::memory_order_relaxed); });
  return sum;
}

void after_fork_in_child() {
  t_local.tid = 0;
  uint32_t gen = thread_registry::g_fork_generation.load(std::memory_order_relaxed) + 1;
  thread_registry::g_fork_generation.store(gen, std::memory_order_relaxed);
  thread_registry::g_lock.store(0, std::memory_order_relaxed);  // a ghost may have held it
  // Statistics are per process: a forked server's children (PostgreSQL
  // backends) report what they did, not what their parent had counted.
  for_each_mapped_slot([](ThreadSlot& s) {
    for (auto& e : s.events) e.store(0, std::memory_order_relaxed);
  });
  thread_registry::g_shared_slot.generation.store(gen, std::memory_order_relaxed);  // never a ghost
  const bool attached = t_local.slot != nullptr && !is_shared(*t_local.slot);
  thread_registry::g_attached_threads.store(attached ? 1 : 0, std::memory_order_relaxed);  // the others are ghosts
  if (ThreadSlot* s = t_local.slot; s != nullptr && !is_shared(*s)) {
    s->tid = current_tid();
    s->generation.store(gen, std::memory_order_relaxed);
    s->blocked.store(0, std::memory_order_relaxed);
  }
}

}  // namespace lockswap
