// tests/select/select_guest.cpp — the program select_test runs with
// LOCKSWAP_SELECT rules: global locks (one inside a larger struct), heap locks
// initialised in two functions, zero-filled objects decided at their first
// lock, and the tag each lock got (preload/abi.h), one `NAME VARIANT` line
// each on stdout, so that the test's assertions see what the library decided.
#include <link.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "preload/abi.h"
#include "preload/config/registry.h"

using namespace lockswap;

// Globals the rules name by symbol. g_table's lock sits inside a larger
// struct: `sym:g_table` matches it.
struct Table {
  long before[5];
  pthread_mutex_t inner;
  long after;
};
extern "C" {
Table g_table;                                          // zero-filled
pthread_mutex_t g_plain = PTHREAD_MUTEX_INITIALIZER;    // statically initialised
pthread_mutex_t g_site = PTHREAD_MUTEX_INITIALIZER;     // first locked at one site
pthread_rwlock_t g_rw_swapped = PTHREAD_RWLOCK_INITIALIZER;
pthread_rwlock_t g_rw_other = PTHREAD_RWLOCK_INITIALIZER;
sem_t g_sem;                                            // zero-filled: a semaphore of value 0
pthread_mutex_t g_first_locked;                         // zero-filled, first locked in first_locker()
}

// C++ names: internal linkage (_ZL...) and a namespace (_ZN...E).
static pthread_mutex_t s_static_lock = PTHREAD_MUTEX_INITIALIZER;
namespace ns {
pthread_mutex_t g_ns_lock = PTHREAD_MUTEX_INITIALIZER;
__attribute__((noinline)) void init_in_ns(pthread_mutex_t* m, int) {
  pthread_mutex_init(m, nullptr);
  asm volatile("" ::: "memory");
}
}  // namespace ns

struct TagName {
  unsigned tag;
  const char* name;
};
#define MUTEX_TAG(id, name, type, desc) {static_cast<unsigned>(MutexVariant::id), name},
#define RWLOCK_TAG(id, name, type, desc) {static_cast<unsigned>(RwlockVariant::id), name},
#define SEM_TAG(id, name, type, desc) {static_cast<unsigned>(SemVariant::id), name},
constexpr TagName kMutexTags[] = {LOCKSWAP_MUTEX_VARIANTS(MUTEX_TAG)};
constexpr TagName kRwlockTags[] = {LOCKSWAP_RWLOCK_VARIANTS(RWLOCK_TAG)};
constexpr TagName kSemTags[] = {LOCKSWAP_SEM_VARIANTS(SEM_TAG)};

template <size_t N>
const char* name_of(const TagName (&names)[N], unsigned tag) {
  for (const TagName& t : names)
    if (t.tag == (tag & abi::kTagVariantMask)) return t.name;  // kTagSelected: events counted apart
  return "undecided";
}

const char* variant_of(pthread_mutex_t* m) { return name_of(kMutexTags, abi::mutex_tag(abi::obj(m).kind.load())); }
const char* variant_of(pthread_rwlock_t* l) { return name_of(kRwlockTags, abi::rwlock_tag(l).load()); }
const char* variant_of(sem_t* s) { return name_of(kSemTags, abi::sem_tag(s).load()); }

extern "C" {
__attribute__((noinline)) void init_heap_lock(pthread_mutex_t* m) {
  pthread_mutex_init(m, nullptr);
  asm volatile("" ::: "memory");  // not a tail call: the site is in this function
}
__attribute__((noinline)) void init_other_lock(pthread_mutex_t* m) {
  pthread_mutex_init(m, nullptr);
  asm volatile("" ::: "memory");
}
__attribute__((noinline)) void first_locker(pthread_mutex_t* m) {
  pthread_mutex_lock(m);
  asm volatile("" ::: "memory");
}
__attribute__((noinline)) void take_at_site() {
  pthread_mutex_lock(&g_site);
  asm volatile("" ::: "memory");
  pthread_mutex_unlock(&g_site);
}
}

void check(int rc, const char* what) {
  if (rc != 0) {
    fprintf(stderr, "%s: %s\n", what, strerror(rc));
    exit(3);
  }
}

// Every lock used once, then its variant.
void print_tags(pthread_mutex_t* heap, pthread_mutex_t* other) {
  take_at_site();
  check(pthread_mutex_lock(&g_table.inner), "lock g_table.inner");
  check(pthread_mutex_unlock(&g_table.inner), "unlock g_table.inner");
  check(pthread_mutex_lock(&g_plain), "lock g_plain");
  check(pthread_mutex_unlock(&g_plain), "unlock g_plain");
  first_locker(&g_first_locked);
  check(pthread_mutex_unlock(&g_first_locked), "unlock g_first_locked");
  check(pthread_mutex_lock(&s_static_lock), "lock s_static_lock");
  check(pthread_mutex_unlock(&s_static_lock), "unlock s_static_lock");
  check(pthread_mutex_lock(&ns::g_ns_lock), "lock ns::g_ns_lock");
  check(pthread_mutex_unlock(&ns::g_ns_lock), "unlock ns::g_ns_lock");
  pthread_mutex_t in_ns;
  ns::init_in_ns(&in_ns, 0);
  check(pthread_mutex_lock(&in_ns), "lock in_ns");
  check(pthread_mutex_unlock(&in_ns), "unlock in_ns");
  printf("s_static_lock %s\nns::g_ns_lock %s\nin_ns %s\n", variant_of(&s_static_lock), variant_of(&ns::g_ns_lock),
         variant_of(&in_ns));
  check(pthread_mutex_lock(heap), "lock heap");
  check(pthread_mutex_unlock(heap), "unlock heap");
  check(pthread_mutex_lock(other), "lock other");
  check(pthread_mutex_unlock(other), "unlock other");
  check(pthread_rwlock_rdlock(&g_rw_swapped), "rdlock");
  check(pthread_rwlock_unlock(&g_rw_swapped), "rw unlock");
  check(pthread_rwlock_wrlock(&g_rw_other), "wrlock");
  check(pthread_rwlock_unlock(&g_rw_other), "rw unlock");
  check(sem_post(&g_sem), "sem_post");
  check(sem_wait(&g_sem), "sem_wait");
  printf("g_table.inner %s\n", variant_of(&g_table.inner));
  printf("g_plain %s\n", variant_of(&g_plain));
  printf("g_site %s\n", variant_of(&g_site));
  printf("g_first_locked %s\n", variant_of(&g_first_locked));
  printf("heap %s\n", variant_of(heap));
  printf("other %s\n", variant_of(other));
  printf("g_rw_swapped %s\n", variant_of(&g_rw_swapped));
  printf("g_rw_other %s\n", variant_of(&g_rw_other));
  printf("g_sem %s\n", variant_of(&g_sem));
}

// The link-time address of g_plain in this executable (as `nm` shows it),
// for range: rules, and g_site's address for the statistics records.
void print_addresses() {
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void*) {
        auto at = reinterpret_cast<uintptr_t>(&g_plain) - info->dlpi_addr;
        printf("g_plain_vaddr %#lx\n", static_cast<unsigned long>(at));
        return 1;  // the executable comes first
      },
      nullptr);
  printf("g_site_addr %#lx\n", reinterpret_cast<unsigned long>(&g_site));
}

// The child keeps each lock's variant, and the lock works there.
int fork_check() {
  pthread_mutex_lock(&g_plain);
  pthread_mutex_unlock(&g_plain);
  pthread_rwlock_wrlock(&g_rw_swapped);
  pthread_rwlock_unlock(&g_rw_swapped);
  printf("parent g_plain %s\nparent g_rw_swapped %s\n", variant_of(&g_plain), variant_of(&g_rw_swapped));
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    check(pthread_mutex_lock(&g_plain), "child lock");
    check(pthread_mutex_unlock(&g_plain), "child unlock");
    check(pthread_rwlock_rdlock(&g_rw_swapped), "child rdlock");
    check(pthread_rwlock_unlock(&g_rw_swapped), "child rw unlock");
    printf("child g_plain %s\nchild g_rw_swapped %s\n", variant_of(&g_plain), variant_of(&g_rw_swapped));
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 4;
}

// Mixed variants in one process, contended: a condvar ping-pong on the
// swapped mutex, writers and readers on the swapped and the other rwlock
// with a non-atomic counter checked for lost updates.
int mixed_check() {
  constexpr int kRounds = 20000, kThreads = 4;
  pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
  int turn = 0;
  std::thread pong([&] {
    for (int i = 0; i < kRounds / 10; ++i) {
      pthread_mutex_lock(&g_plain);
      while (turn != 1) pthread_cond_wait(&cond, &g_plain);
      turn = 0;
      pthread_cond_signal(&cond);
      pthread_mutex_unlock(&g_plain);
    }
  });
  for (int i = 0; i < kRounds / 10; ++i) {
    pthread_mutex_lock(&g_plain);
    turn = 1;
    pthread_cond_signal(&cond);
    while (turn != 0) pthread_cond_wait(&cond, &g_plain);
    pthread_mutex_unlock(&g_plain);
  }
  pong.join();
  long counters[3] = {0, 0, 0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        pthread_rwlock_t* l = (i + t) % 2 ? &g_rw_swapped : &g_rw_other;
        if (i % 4 == 0) {
          pthread_rwlock_rdlock(l);
          pthread_rwlock_unlock(l);
          continue;
        }
        pthread_rwlock_wrlock(l);
        ++counters[l == &g_rw_swapped ? 0 : 1];  // lost updates: no mutual exclusion
        pthread_rwlock_unlock(l);
        pthread_mutex_lock(&g_table.inner);
        ++counters[2];
        pthread_mutex_unlock(&g_table.inner);
      }
    });
  for (auto& t : ts) t.join();
  long writes = kThreads * (kRounds - kRounds / 4);
  printf("rw_writes %ld expected %ld\nmutex_count %ld expected %ld\n", counters[0] + counters[1], writes, counters[2],
         writes);
  printf("g_plain %s\ng_rw_swapped %s\ng_rw_other %s\ng_table.inner %s\n", variant_of(&g_plain),
         variant_of(&g_rw_swapped), variant_of(&g_rw_other), variant_of(&g_table.inner));
  return counters[0] + counters[1] == writes && counters[2] == writes ? 0 : 5;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "tags";
  auto* heap = static_cast<pthread_mutex_t*>(malloc(sizeof(pthread_mutex_t)));
  auto* other = static_cast<pthread_mutex_t*>(malloc(sizeof(pthread_mutex_t)));
  memset(heap, 0xa5, sizeof *heap);  // garbage until init: the init decides
  memset(other, 0xa5, sizeof *other);
  init_heap_lock(heap);
  init_other_lock(other);
  if (strcmp(mode, "tags") == 0) print_tags(heap, other);
  else if (strcmp(mode, "addresses") == 0) print_addresses();
  else if (strcmp(mode, "site") == 0) {
    print_addresses();  // this run's addresses: the statistics name them
    take_at_site();
  }
  else if (strcmp(mode, "fork") == 0) return fork_check();
  else if (strcmp(mode, "mixed") == 0) return mixed_check();
  else return 64;
  return 0;
}
