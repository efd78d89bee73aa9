/* tests/lwlock/alloc_lwlock.c — the LWLock paths lockswap runs allocate
 * nothing: every call of the API, contended ones included (a forked peer
 * holds the lock), with the counting allocator of tests/common. Exit 0 when
 * no allocator call was made inside an LWLock call. */
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "tests/common/alloc_count.h"
#include "tests/lwlock/fake_postgres.h"

static FakeProc g_procs[2];

#define INSIDE(call) \
  do {               \
    ++t_inside;      \
    call;            \
    --t_inside;      \
  } while (0)

static void one_of_each(FakeLwlock* l, uint64_t* var) {
  uint64_t now;
  INSIDE(LWLockAcquire(l, LW_EXCLUSIVE));
  INSIDE(LWLockHeldByMe(l));
  INSIDE(LWLockHeldByMeInMode(l, LW_EXCLUSIVE));
  INSIDE(LWLockAnyHeldByMe(l, 1, sizeof *l));
  INSIDE(LWLockUpdateVar(l, var, 1));
  INSIDE(LWLockReleaseClearVar(l, var, 0));
  INSIDE(LWLockAcquire(l, LW_SHARED));
  INSIDE(LWLockConditionalAcquire(l, LW_SHARED));
  INSIDE(LWLockReleaseAll());
  INSIDE(LWLockAcquireOrWait(l, LW_EXCLUSIVE));
  INSIDE(LWLockRelease(l));
  INSIDE(LWLockWaitForVar(l, var, 0, &now));
}

int main(void) {
  struct { FakeLwlock lock; uint64_t var; volatile int held; } *s =
      mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED) return 2;
  fake_lwlock_init(&s->lock, 0);
  g_procs[0].procno = 0;
  MyProc = &g_procs[0];
  for (int i = 0; i < 1000; ++i) one_of_each(&s->lock, &s->var);
  /* Contended: a child holds the lock for a while, we wait for it. */
  pid_t kid = fork();
  if (kid == 0) {
    g_procs[1].procno = 1;
    MyProc = &g_procs[1];
    LWLockAcquire(&s->lock, LW_EXCLUSIVE);
    s->held = 1;
    usleep(100000);
    LWLockRelease(&s->lock);
    _exit(0);
  }
  while (!s->held) usleep(1000);
  INSIDE(LWLockAcquire(&s->lock, LW_SHARED));
  INSIDE(LWLockRelease(&s->lock));
  int status;
  waitpid(kid, &status, 0);
  long n = atomic_load(&g_inside_allocs);
  if (n != 0) fprintf(stderr, "alloc_lwlock: %ld allocator calls inside LWLock calls\n", n);
  return n == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
