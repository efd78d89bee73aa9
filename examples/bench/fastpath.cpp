// examples/bench/fastpath.cpp — K idle (uncontended) lock+unlock pairs, for
// instruction counting under valgrind --tool=callgrind (fastpath_callgrind.sh).
//
//   fastpath MODE K      MODE: mutex | rdlock | wrlock | sem | empty   (sem: sem_wait + sem_post)
//
// One warm-up pair runs first (lazy PLT binding, liblockswap's configuration,
// first-touch of the lock), then lockswap_fastpath_loop(K) runs the measured
// pairs. The script collects only inside that function
// (--toggle-collect=lockswap_fastpath_loop) and takes the difference of two
// runs with different K, so constant costs cancel and what remains is the
// cost of one pair *including* the minimal loop and the calls through the
// PLT (the real cost a program pays). `empty` is the loop alone.
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_mx = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t g_rw = PTHREAD_RWLOCK_INITIALIZER;
static sem_t g_sem;  // one unit, initialised in main

enum Mode { kMutex, kRdlock, kWrlock, kSem, kEmpty };

// `k` pairs of lock() and unlock(). Inlined into each mode's case, so every
// mode gets a loop of its own: a lock call, an unlock call and the loop's own
// increment/compare/branch, no indirect call.
template <class Lock, class Unlock>
__attribute__((always_inline)) inline int pairs(long k, Lock lock, Unlock unlock) {
  int bad = 0;
  for (long i = 0; i < k; ++i) {
    bad |= lock();
    bad |= unlock();
  }
  return bad;
}

__attribute__((always_inline)) inline int mode_pairs(int mode, long k) {
  switch (mode) {
    case kMutex:
      return pairs(k, [] { return pthread_mutex_lock(&g_mx); }, [] { return pthread_mutex_unlock(&g_mx); });
    case kRdlock:
      return pairs(k, [] { return pthread_rwlock_rdlock(&g_rw); }, [] { return pthread_rwlock_unlock(&g_rw); });
    case kWrlock:
      return pairs(k, [] { return pthread_rwlock_wrlock(&g_rw); }, [] { return pthread_rwlock_unlock(&g_rw); });
    case kSem:
      return pairs(k, [] { return sem_wait(&g_sem); }, [] { return sem_post(&g_sem); });
  }
  for (long i = 0; i < k; ++i) __asm__ volatile("" ::: "memory");
  return 0;
}

// The warm-up pair.
static int one_pair(int mode) { return mode_pairs(mode, 1); }

// The measured loop.
extern "C" __attribute__((noinline)) int lockswap_fastpath_loop(int mode, long k) { return mode_pairs(mode, k); }

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s mutex|rdlock|wrlock|sem|empty K\n", argv[0]);
    return 2;
  }
  int mode;
  if (strcmp(argv[1], "mutex") == 0) mode = kMutex;
  else if (strcmp(argv[1], "rdlock") == 0) mode = kRdlock;
  else if (strcmp(argv[1], "wrlock") == 0) mode = kWrlock;
  else if (strcmp(argv[1], "sem") == 0) mode = kSem;
  else if (strcmp(argv[1], "empty") == 0) mode = kEmpty;
  else {
    fprintf(stderr, "fastpath: unknown mode %s\n", argv[1]);
    return 2;
  }
  long k = strtol(argv[2], nullptr, 10);
  if (sem_init(&g_sem, 0, 1) != 0) {
    perror("fastpath: sem_init");
    return 1;
  }
  if (one_pair(mode) != 0 || lockswap_fastpath_loop(mode, k) != 0) {
    fprintf(stderr, "fastpath: a lock call failed\n");
    return 1;
  }
  return 0;
}
