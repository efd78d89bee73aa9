#include "core/thread_registry.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "arch/futex.h"
#include "arch/relax.h"
#include "arch/rseq.h"
#include "core/oncpu.h"
#include "core/spin_guard.h"

namespace lockswap {

__thread ThreadLocal t_local __attribute__((tls_model("initial-exec"))) = {nullptr, 0, 0};

namespace registry {
std::atomic<ThreadSlot*> g_chunks[kChunks];
std::atomic<uint32_t> g_fork_generation{0};

namespace {
// Registry lock (SpinGuard: yields, because under oversubscription its
// holder may be preempted).
std::atomic<uint32_t> g_lock{0};
uint32_t g_next_id = 1;                 // next never-used id (under g_lock)
ThreadSlot* g_free = nullptr;           // recycled slots (under g_lock)
std::atomic<bool> g_key_ready{false};
pthread_key_t g_exit_key;

struct RegistryGuard : SpinGuard {
  RegistryGuard() : SpinGuard(g_lock) {}
};

ThreadSlot* map_chunk() {
  void* p = mmap(nullptr, sizeof(ThreadSlot) * kSlotsPerChunk, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<ThreadSlot*>(p);
}

void on_thread_exit(void* arg) {
  auto* s = static_cast<ThreadSlot*>(arg);
  if (void (*hook)() = g_thread_exit_hook.load(std::memory_order_relaxed)) hook();
  if (t_local.slot == s) t_local.slot = nullptr;
  // Retract the rseq pointer and wait out anyone dereferencing it: the rseq
  // area lives in this thread's TCB, which may be unmapped after we exit.
  s->cpu_word.store(nullptr, std::memory_order_seq_cst);
  while (s->peekers.load(std::memory_order_seq_cst) != 0) sched_yield();
  s->blocked.store(0, std::memory_order_relaxed);
  RegistryGuard g;
  s->next_free = g_free;
  g_free = s;
}

ThreadSlot* take_slot() {
  RegistryGuard g;
  if (ThreadSlot* s = g_free) {
    g_free = s->next_free;
    return s;
  }
  if (g_next_id > kMaxThreads) return nullptr;
  uint32_t i = g_next_id - 1;
  auto& chunk = g_chunks[i >> kSlotsPerChunkShift];
  ThreadSlot* base = chunk.load(std::memory_order_relaxed);
  if (base == nullptr) {
    base = map_chunk();
    if (base == nullptr) return nullptr;
    chunk.store(base, std::memory_order_release);
  }
  ThreadSlot* s = &base[i & (kSlotsPerChunk - 1)];
  s->id = g_next_id++;
  return s;
}

void ensure_exit_key() {
  if (g_key_ready.load(std::memory_order_acquire)) return;
  RegistryGuard g;
  if (!g_key_ready.load(std::memory_order_relaxed)) {
    pthread_key_create(&g_exit_key, on_thread_exit);
    g_key_ready.store(true, std::memory_order_release);
  }
}
}  // namespace

static ThreadSlot& attach_uncancellable();

ThreadSlot& attach_current_thread() {
  // Not even an asynchronous cancellation may end a thread here: it would
  // die holding the registry lock, and every later thread would spin on it.
  int old_state;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old_state);
  ThreadSlot& s = attach_uncancellable();
  pthread_setcancelstate(old_state, &old_state);
  return s;
}

static ThreadSlot& attach_uncancellable() {
  ensure_exit_key();
  ThreadSlot* s = take_slot();
  if (s == nullptr) {
    // Out of address space for 4M live threads: nothing sensible remains.
    static const char msg[] = "lockswap: thread registry exhausted\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  s->tid = current_tid();
  s->generation.store(g_fork_generation.load(std::memory_order_relaxed), std::memory_order_relaxed);
  s->cpu_word.store(arch::rseq_cpu_id_word(), std::memory_order_release);
  t_local.slot = s;
  pthread_setspecific(g_exit_key, s);
  return *s;
}
}  // namespace registry

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
  arch::futex_wake(&s.park, 1);
}

namespace {
// Calls fn(slot) for every slot ever mapped (live, exited and recycled).
template <class Fn>
void for_each_mapped_slot(Fn&& fn) {
  for (auto& chunk_ptr : registry::g_chunks) {
    ThreadSlot* chunk = chunk_ptr.load(std::memory_order_acquire);
    if (chunk == nullptr) break;
    for (uint32_t i = 0; i < registry::kSlotsPerChunk; ++i) fn(chunk[i]);
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
  uint32_t gen = registry::g_fork_generation.load(std::memory_order_relaxed) + 1;
  registry::g_fork_generation.store(gen, std::memory_order_relaxed);
  registry::g_lock.store(0, std::memory_order_relaxed);  // a ghost may have held it
  // Statistics are per process: a forked server's children (PostgreSQL
  // backends) report what they did, not what their parent had counted.
  for_each_mapped_slot([](ThreadSlot& s) {
    for (auto& e : s.events) e.store(0, std::memory_order_relaxed);
  });
  if (ThreadSlot* s = t_local.slot) {
    s->tid = current_tid();
    s->generation.store(gen, std::memory_order_relaxed);
    s->blocked.store(0, std::memory_order_relaxed);
  }
}

}  // namespace lockswap
