// preload/pthread/mixed.cpp — LOCKSWAP_SELECT's per-lock tables (preload/config/select.h).
//
// A family named by a rule gets mixed entries in g_ops: each reads the object's selection tag (abi.h) and jumps
// through that variant's table, the tag indexing `g_by_tag`. Tag 0 (not
// decided yet) and values no variant has index tables of `decide` entries:
// the object's first sight, where the rules are asked once and the tag is
// set with a compare-and-swap, so that two first users agree. Objects glibc
// must own (robust, PI/PP, process-shared) and destroyed ones get no tag and
// keep the process-wide variant (`g_base`), as without rules. Families
// without a rule keep their variant's table: nothing changes for them.
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>

#include <atomic>
#include <cstdint>

#include "core/thread_registry.h"
#include "preload/abi.h"
#include "preload/stats/selected.h"
#include "preload/config/config.h"
#include "preload/pthread/entry.h"
#include "preload/pthread/families.h"
#include "preload/pthread/mixed.h"
#include "preload/pthread/adapters.h"
#include "preload/config/select.h"

namespace lockswap {
namespace {

using select::Family;
constexpr unsigned kTagSlots = abi::kTagValues;
static_assert(kTagSlots - 1 == abi::kKindTagMask >> abi::kKindTagShift);
// Every variant's enum value is a tag. A destroyed mutex's __kind (-1) reads
// as tag 15: no mutex variant may have it (it reaches `decide`, which returns
// the process-wide table).
static_assert(kMutexVariantCount < abi::kTagVariantMask);
static_assert(kRwlockVariantCount <= abi::kTagVariantMask && kSemVariantCount <= abi::kTagVariantMask);
OpsTable g_by_tag[3][kTagSlots];
OpsTable g_base;             // the process-wide variants (untagged instantiations)
unsigned g_base_tag[3];      // their tags

int family_index(pthread_mutex_t*) { return static_cast<int>(Family::mutex); }
int family_index(pthread_rwlock_t*) { return static_cast<int>(Family::rwlock); }
int family_index(sem_t*) { return static_cast<int>(Family::sem); }

LOCKSWAP_INLINE unsigned tag_of(pthread_mutex_t* m) { return abi::mutex_tag(abi::obj(m).kind.load(std::memory_order_relaxed)); }
LOCKSWAP_INLINE unsigned tag_of(pthread_rwlock_t* l) { return abi::rwlock_tag(l).load(std::memory_order_relaxed) & (kTagSlots - 1); }
LOCKSWAP_INLINE unsigned tag_of(sem_t* s) { return abi::sem_tag(s).load(std::memory_order_relaxed) & (kTagSlots - 1); }

bool g_variant_tag[3][kTagSlots];  // the tags that name a variant
bool is_variant_tag(int family, unsigned tag) { return g_variant_tag[family][tag]; }

// The selected lock whose call this thread is in (counted_apart), for a
// signal handler's nested call to hand over what it had counted.
__thread const void* t_counting_for __attribute__((tls_model("initial-exec")));

// The call site the rules see: the caller of the export that reached a
// mixed entry by tail jumps, or the one a profiling wrapper in between saw.
LOCKSWAP_INLINE uintptr_t site_of_call(void* ra, void* cfa) {
  return g_config.profile ? select::t_site_hint : select::caller_ip(ra, cfa);
}

// The tag of an object first seen from `site`: a rule's variant, marked
// kTagSelected when its events get counters of their own, else the
// process-wide variant's.
unsigned choose(Family f, const void* object, uintptr_t site) {
  int rule;
  unsigned v = select::decide(f, object, site, &rule);
  if (v == 0) return g_base_tag[static_cast<int>(f)];
  // Only a run that writes statistics (LOCKSWAP_STATS=counts|profile) pays
  // for counting apart: a few instructions per call of the selected lock.
  bool apart = LOCKSWAP_LOCK_EVENTS && g_config.stats &&
               stats::note_selected(f, object, static_cast<uint8_t>(v), rule);
  return apart ? v | abi::kTagSelected : v;
}

__attribute__((noinline)) const OpsTable& decided_table(pthread_mutex_t* m, uintptr_t site) {
  std::atomic<int32_t>& kind = abi::obj(m).kind;
  int k = kind.load(std::memory_order_relaxed);
  for (;;) {
    if (k == abi::kKindDestroyed || abi::glibc_owned(k)) return g_base;
    if (unsigned tag = abi::mutex_tag(k); tag != 0) return is_variant_tag(0, tag) ? g_by_tag[0][tag] : g_base;
    unsigned v = choose(Family::mutex, m, site);
    if (kind.compare_exchange_weak(k, abi::with_tag(k, v), std::memory_order_relaxed)) return g_by_tag[0][v];
  }
}

// The tag word of a rwlock or semaphore: 0 until decided, the variant after.
template <class Obj>
const OpsTable& decided_by_word(Obj* o, std::atomic_ref<uint32_t> word, bool glibc_owned, uintptr_t site) {
  int f = family_index(o);
  if (glibc_owned) return g_base;
  uint32_t tag = word.load(std::memory_order_relaxed);
  for (;;) {
    if (tag != 0) return tag < kTagSlots && is_variant_tag(f, tag) ? g_by_tag[f][tag] : g_base;
    unsigned v = choose(static_cast<Family>(f), o, site);
    if (word.compare_exchange_weak(tag, v, std::memory_order_relaxed)) return g_by_tag[f][v];
  }
}
__attribute__((noinline)) const OpsTable& decided_table(pthread_rwlock_t* l, uintptr_t site) {
  return decided_by_word(l, abi::rwlock_tag(l), abi::glibc_owned(abi::obj(l)), site);
}
__attribute__((noinline)) const OpsTable& decided_table(sem_t* s, uintptr_t site) {
  return decided_by_word(s, abi::sem_tag(s), abi::sem_shared(s), site);
}

// Every slot whose first argument is the lock object. `by_tag` is the slot's
// column of g_by_tag, so that the entry is one indexed jump.
template <auto Slot>
struct Mixed;
template <class R, class Obj, class... A, R (*OpsTable::*Slot)(Obj*, A...)>
struct Mixed<Slot> {
  static inline R (*by_tag[kTagSlots])(Obj*, A...);
  static void fill() {
    for (unsigned tag = 0; tag < kTagSlots; ++tag) by_tag[tag] = g_by_tag[family_index(static_cast<Obj*>(nullptr))][tag].*Slot;
  }
  static R call(Obj* o, A... args) { return by_tag[tag_of(o)](o, args...); }
  // A selected lock (kTagSelected): its variant's entry, with the slot's
  // kEventsApart bit set, so that the lock events of the call are also
  // counted for this lock (stats::hand_over_events). A thread on the shared
  // slot counts with the process only. A signal handler's selected-lock call
  // inside hands over what its interrupted call had counted first, and leaves
  // the bit and the object as it found them.
  static R counted_apart(Obj* o, A... args) {
    ThreadSlot& s = self_slot();
    if (is_shared(s)) return by_tag[tag_of(o) & abi::kTagVariantMask](o, args...);
    uint8_t outer_mode = s.event_mode;
    const void* outer = t_counting_for;
    if (s.apart_pending) stats::hand_over_events(outer, s);
    t_counting_for = o;
    s.event_mode = kEventsApart;
    asm volatile("" ::: "memory");  // set before the call's first event, handler included
    R r = by_tag[tag_of(o) & abi::kTagVariantMask](o, args...);
    asm volatile("" ::: "memory");
    if (s.apart_pending) stats::hand_over_events(o, s);
    s.event_mode = outer_mode;
    t_counting_for = outer;
    return r;
  }
  // Reached from call() by a tail jump: the return address is the caller's.
  static R decide(Obj* o, A... args) {
    uintptr_t site = site_of_call(__builtin_return_address(0), __builtin_dwarf_cfa());
    return (decided_table(o, site).*Slot)(o, args...);
  }
};

// Initialisation always decides (again: destroy + init re-decides), from
// the init call's site; the tag is written before the object is published.
int mixed_mutex_init(pthread_mutex_t* m, const pthread_mutexattr_t* a) {
  unsigned v = choose(Family::mutex, m, site_of_call(__builtin_return_address(0), __builtin_dwarf_cfa()));
  int rc = g_by_tag[0][v].pthread_mutex_init(m, a);
  int k = abi::obj(m).kind.load(std::memory_order_relaxed);
  if (rc == 0 && !abi::glibc_owned(k)) abi::obj(m).kind.store(abi::with_tag(k, v), std::memory_order_relaxed);
  return rc;
}
int mixed_rwlock_init(pthread_rwlock_t* l, const pthread_rwlockattr_t* a) {
  unsigned v = choose(Family::rwlock, l, site_of_call(__builtin_return_address(0), __builtin_dwarf_cfa()));
  int rc = g_by_tag[1][v].pthread_rwlock_init(l, a);
  if (rc == 0 && !abi::glibc_owned(abi::obj(l))) abi::rwlock_tag(l).store(v, std::memory_order_relaxed);
  return rc;
}
// A process-shared semaphore keeps the process-wide variant untagged: every
// variant keeps glibc's word for it (core/sem.h), so processes agree.
int mixed_sem_init(sem_t* s, int pshared, unsigned value) {
  if (pshared != 0) return g_base.sem_init(s, pshared, value);
  unsigned v = choose(Family::sem, s, site_of_call(__builtin_return_address(0), __builtin_dwarf_cfa()));
  int rc = g_by_tag[2][v].sem_init(s, pshared, value);
  if (rc == 0) abi::sem_tag(s).store(v, std::memory_order_relaxed);
  return rc;
}

// Calls fn.template operator()<Slot>() for every slot of family `f` whose
// first argument is the lock object: all but its initialiser.
template <class Fn>
void for_each_object_slot(Family f, Fn&& fn) {
  switch (f) {
    case Family::mutex: return for_each_function<ApiFamily::mutex, false>(fn);
    case Family::rwlock: return for_each_function<ApiFamily::rwlock, false>(fn);
    case Family::sem: return for_each_function<ApiFamily::sem, false>(fn);
    case Family::lwlock: return;  // not an interposed family: preload/lwlock/ reads its rules itself
  }
}
constexpr Family kFamilies[] = {Family::mutex, Family::rwlock, Family::sem};

// A selected lock's table: its variant's, each object slot counting apart.
void fill_counted_apart(int family, unsigned variant_tag) {
  OpsTable& t = g_by_tag[family][variant_tag | abi::kTagSelected];
  t = g_by_tag[family][variant_tag];
  for_each_object_slot(static_cast<Family>(family), [&]<auto Slot>() { t.*Slot = &Mixed<Slot>::counted_apart; });
  g_variant_tag[family][variant_tag | abi::kTagSelected] = true;
}

// g_by_tag: each variant's table at its tag, the counting one at the tag
// with kTagSelected, `decide` entries elsewhere.
void fill_tag_tables() {
  for (Family f : kFamilies)
    for (OpsTable& t : g_by_tag[static_cast<int>(f)])
      for_each_object_slot(f, [&]<auto Slot>() { t.*Slot = &Mixed<Slot>::decide; });
#define X(id, name, type, desc)                                                  \
  install_mutex_family(g_by_tag[0][static_cast<unsigned>(MutexVariant::id)], MutexVariant::id, true); \
  g_variant_tag[0][static_cast<unsigned>(MutexVariant::id)] = true;
  LOCKSWAP_MUTEX_VARIANTS(X)
#undef X
#define X(id, name, type, desc)                                             \
  install_rwlock_family(g_by_tag[1][static_cast<unsigned>(RwlockVariant::id)], RwlockVariant::id); \
  g_variant_tag[1][static_cast<unsigned>(RwlockVariant::id)] = true;
  LOCKSWAP_RWLOCK_VARIANTS(X)
#undef X
#define X(id, name, type, desc)                                       \
  install_sem_family(g_by_tag[2][static_cast<unsigned>(SemVariant::id)], SemVariant::id); \
  g_variant_tag[2][static_cast<unsigned>(SemVariant::id)] = true;
  LOCKSWAP_SEM_VARIANTS(X)
#undef X
  for (int family = 0; family < 3; ++family)
    for (unsigned tag = 1; tag <= abi::kTagVariantMask; ++tag)
      if (g_variant_tag[family][tag]) fill_counted_apart(family, tag);
  for (Family f : kFamilies) for_each_object_slot(f, []<auto Slot>() { Mixed<Slot>::fill(); });
}

}  // namespace

// Racing installers wait for the first to fill the tag tables.
void install_mixed(OpsTable& t) {
  static std::atomic<int> state{0};
  int expected = 0;
  if (state.compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
    g_base = t;
    g_base_tag[0] = static_cast<unsigned>(mutex_variant());
    g_base_tag[1] = static_cast<unsigned>(rwlock_variant());
    g_base_tag[2] = static_cast<unsigned>(sem_variant());
    fill_tag_tables();
    state.store(2, std::memory_order_release);
  }
  while (state.load(std::memory_order_acquire) != 2) sched_yield();
  auto mixed = [&]<auto Slot>() { t.*Slot = &Mixed<Slot>::call; };
  if (select::active(Family::mutex)) {
    for_each_object_slot(Family::mutex, mixed);
    t.pthread_mutex_init = mixed_mutex_init;
    // glibc's condvar reaches into glibc's mutex layout: with mutexes of
    // several variants, the native condvar, which takes the mutex through
    // g_ops (the mixed entries), serves them all.
    install_native_cond(t);
  }
  if (select::active(Family::rwlock)) {
    for_each_object_slot(Family::rwlock, mixed);
    t.pthread_rwlock_init = mixed_rwlock_init;
  }
  if (select::active(Family::sem)) {
    for_each_object_slot(Family::sem, mixed);
    t.sem_init = mixed_sem_init;
  }
}

}  // namespace lockswap
