/* tests/lwlock/uprobe_target.c — LWLock calls under an entry uprobe
 * (tests/lwlock/uprobe.sh): a tracer's breakpoint on a redirected entry
 * runs the file's first instruction and resumes after it, where lockswap's
 * patch must carry on (preload/lwlock/entry_patch.h).
 *
 *   uprobe_target [wait]   with `wait`: one round, then "ready" on stdout,
 *                          then a line on stdin before the rest
 *
 * Each round: a forked peer and this process take one lock exclusively in
 * turn, each adding to a plain counter under it, with LWLockHeldByMe and
 * LWLockAnyHeldByMe (an int argument) asked while held. Prints the calls of
 * LWLockAcquire and LWLockRelease this process and its peers made after
 * `ready` (all of them without `wait`) and exits 0 when every count is
 * right. */
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "tests/lwlock/fake_postgres.h"

enum { kPerProcess = 20000 };

struct Shared {
  FakeLwlock lock;
  long counter;
};

static FakeProc g_procs[2];

static int hammer(struct Shared* s, int procno) {
  MyProc = &g_procs[procno];
  g_procs[procno].procno = procno;
  for (int i = 0; i < kPerProcess; ++i) {
    LWLockAcquire(&s->lock, LW_EXCLUSIVE);
    if (!LWLockHeldByMe(&s->lock) || !LWLockAnyHeldByMe(&s->lock, 1, sizeof s->lock)) return 1;
    s->counter++;
    LWLockRelease(&s->lock);
  }
  return 0;
}

/* One round: this process and a forked peer; 0 when both counted right. */
static int round_of(struct Shared* s) {
  long before = s->counter;
  pid_t kid = fork();
  if (kid < 0) return 1;
  if (kid == 0) _exit(hammer(s, 1));
  int bad = hammer(s, 0), status = 0;
  if (waitpid(kid, &status, 0) != kid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) bad = 1;
  if (s->counter != before + 2L * kPerProcess) {
    fprintf(stderr, "uprobe_target: counter %ld, expected %ld: exclusion broken\n", s->counter, before + 2L * kPerProcess);
    bad = 1;
  }
  return bad;
}

int main(int argc, char** argv) {
  int wait_for_go = argc > 1 && strcmp(argv[1], "wait") == 0;
  struct Shared* s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED) return 2;
  fake_lwlock_init(&s->lock, 0);
  if (wait_for_go) {
    if (round_of(s) != 0) return 1;
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (fgets(line, sizeof line, stdin) == NULL) return 2;
  }
  int bad = round_of(s) | round_of(s);
  printf("calls LWLockAcquire=%d LWLockRelease=%d\n", 4 * kPerProcess, 4 * kPerProcess);
  return bad;
}
