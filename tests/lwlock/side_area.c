/* tests/lwlock/side_area.c — what the LWLock family's side area (the waiter
 * records, the rwsem records and percid's blocks: preload/lwlock/lwlock.cpp,
 * docs/lwlock.md) costs a synthetic server under strict overcommit.
 *
 * Under vm.overcommit_memory=2 the kernel ignores MAP_NORESERVE and charges
 * a shared anonymous mapping its whole size when it is made, touched or not
 * (mm/mmap.c, mm/shmem.c). So the measure is the Size of every shared
 * anonymous mapping of this process (/proc/self/smaps: `s` in the
 * permissions, /dev/zero) that the program did not make itself; the library
 * makes no other one in these runs. It is read in the postmaster, which holds
 * every mapping its backends inherit.
 *
 *   side_area idle     MaxBackends set (postgres -C computes it for the
 *                      runtime GUCs), no LWLock taken, nothing forked:
 *                      nothing may be mapped.
 *   side_area server   a postmaster's start: nothing mapped before
 *                      MaxBackends is set; then shared memory, the
 *                      postmaster's own LWLocks (ShmemIndexLock), backends
 *                      that wait for one another with the lowest and the
 *                      highest process number; a crash restart (every lock
 *                      re-initialised) and backends again. The side area stays
 *                      within (MaxBackends + 5 + max_prepared_xacts) x 56
 *                      bytes rounded to pages, plus percid's blocks under
 *                      percid; a backend whose process number is past the
 *                      last PGPROC is stopped with PANIC when it would wait.
 *   side_area standalone  a standalone backend (bootstrap, single-user):
 *                      forks nothing; its locks taken without and with a
 *                      PGPROC map nothing (percid: its blocks, at the first
 *                      main-array lock); its first call that may wait
 *                      (LWLockWaitForVar) maps the records, within the bound.
 *   side_area nomem    MaxBackends and max_prepared_xacts at MAX_BACKENDS with
 *                      an address-space limit that leaves no room for the
 *                      area: a FATAL through the host's error path (here the
 *                      fake's errfinish), before any backend exists. */
#define FAKE_MAX_BACKENDS 0 /* set below, as InitializeMaxBackends does */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "tests/lwlock/fake_postgres.h"

enum { kBackends = 100, kPrepared = 2, kLocks = 64, kRounds = 2000 };
enum { kRecordBytes = 16 + 40 }; /* a pg waiter record and an rwsem record per process number */

/* The postmaster's shared memory: the main array, the PGPROCs, a counter. */
struct Shared {
  FakeLwlockPadded locks[kLocks];
  FakeProc procs[kBackends + FAKE_AUXILIARY_PROCS + kPrepared + 1];
  volatile long counter;
  volatile int holding;
};
static struct Shared* g_shm;

static int failures;
#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      fprintf(stderr, "side_area: FAIL %s: ", #cond);     \
      fprintf(stderr, __VA_ARGS__);                       \
      fputc('\n', stderr);                                \
      ++failures;                                         \
    }                                                     \
  } while (0)

static int total_procs(void) { return MaxBackends + FAKE_AUXILIARY_PROCS + max_prepared_xacts; }

static const char* variant(void) {
  const char* v = getenv("LOCKSWAP_LWLOCK");
  return v != NULL ? v : "off";
}

/* The bytes of shared anonymous mappings outside [own, own + own_len). */
static long side_area_bytes(const void* own, size_t own_len, int* mappings) {
  FILE* f = fopen("/proc/self/smaps", "r");
  if (f == NULL) {
    perror("side_area: /proc/self/smaps");
    exit(2);
  }
  char line[512];
  long total = 0;
  int counting = 0;
  *mappings = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3) { /* a mapping's first line */
      uintptr_t a = (uintptr_t)own;
      int ours = own != NULL && lo < a + own_len && a < hi;
      counting = perms[3] == 's' && strstr(line, "/dev/zero") != NULL && !ours;
      if (counting) ++*mappings;
      continue;
    }
    long kb;
    if (counting && sscanf(line, "Size: %ld kB", &kb) == 1) total += kb * 1024;
  }
  fclose(f);
  return total;
}

static long bound_for_records(void);

static long page_round(long n) {
  long page = sysconf(_SC_PAGESIZE);
  return (n + page - 1) / page * page;
}

/* percid's blocks (docs/lwlock.md): 512 main-array slots, each a control
 * line and 2 x possible CPUs reader lines, at least 8 and at most 256, a
 * power of two. */
static long percid_bytes(void) {
  long cpus = sysconf(_SC_NPROCESSORS_CONF);
  FILE* f = fopen("/sys/devices/system/cpu/possible", "r");
  if (f != NULL) {
    char buf[256];
    if (fgets(buf, sizeof buf, f) != NULL) {
      const char* last = buf;
      for (const char* p = buf; *p; ++p)
        if (*p == ',' || *p == '-') last = p + 1;
      cpus = strtol(last, NULL, 10) + 1;
    }
    fclose(f);
  }
  long slots = 8;
  while (slots < 2 * cpus && slots < 256) slots *= 2;
  return 512L * 64 * (slots + 1);
}

static void create_shared_memory(void) {
  void* p = mmap(NULL, sizeof(struct Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("side_area: mmap");
    exit(2);
  }
  g_shm = p;
}

static void init_locks(void) {
  for (int i = 0; i < kLocks; ++i) fake_lwlock_init(&g_shm->locks[i].lock, (uint16_t)(i % 3));
  MainLWLockArray = g_shm->locks;
  g_shm->counter = 0;
  g_shm->holding = 0;
}

static FakeLwlock* lock(int i) { return &g_shm->locks[i].lock; }

/* CreateSharedMemoryAndSemaphores: ShmemInitStruct takes ShmemIndexLock in
 * the postmaster itself, which has no PGPROC. */
static void postmaster_takes_its_locks(void) {
  MyProc = NULL;
  for (int i = 0; i < 3; ++i) {
    LWLockAcquire(lock(1), LW_EXCLUSIVE);
    LWLockRelease(lock(1));
    LWLockAcquire(lock(2), LW_SHARED);
    LWLockRelease(lock(2));
  }
}

static void become(int procno) {
  g_shm->procs[procno].procno = procno;
  MyProc = &g_shm->procs[procno];
}

static pid_t backend(int procno, void (*body)(void)) {
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("side_area: fork");
    exit(2);
  }
  if (pid == 0) {
    alarm(60);
    become(procno);
    body();
    _exit(0);
  }
  return pid;
}

static int wait_for(pid_t pid) {
  int status;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The first backend holds lock 3 until the last one waits for it (then for
 * a while), and every backend counts under lock 4. */
static void holder(void) {
  LWLockAcquire(lock(3), LW_EXCLUSIVE);
  g_shm->holding = 1;
  usleep(200000);
  LWLockRelease(lock(3));
}
static void count_under_lock(void) {
  for (int i = 0; i < kRounds; ++i) {
    LWLockAcquire(lock(4), LW_EXCLUSIVE);
    long c = g_shm->counter;
    if (i % 64 == 0) sched_yield();
    g_shm->counter = c + 1;
    LWLockRelease(lock(4));
    LWLockAcquire(lock(5), LW_SHARED);
    LWLockRelease(lock(5));
  }
}
static void waiter(void) {
  while (!g_shm->holding) usleep(1000);
  LWLockAcquire(lock(3), LW_EXCLUSIVE);  /* waits: its record is the last one */
  LWLockRelease(lock(3));
  count_under_lock();
}
static void first(void) {
  holder();
  count_under_lock();
}

static void run_backends(const char* when) {
  int last = total_procs() - 1;
  g_shm->holding = 0;
  pid_t a = backend(0, first);
  pid_t b = backend(last, waiter);
  pid_t c = backend(kBackends / 2, count_under_lock);
  int ra = wait_for(a), rb = wait_for(b), rc = wait_for(c);
  CHECK(ra == 0 && rb == 0 && rc == 0, "%s: backends 0, %d and %d exited %d, %d, %d", when, kBackends / 2, last, ra, rb, rc);
  CHECK(g_shm->counter == 3L * kRounds, "%s: the counter is %ld, not %ld", when, g_shm->counter, 3L * kRounds);
}

/* A backend past the last PGPROC: no record; PANIC when it would wait,
 * under every variant (the check is lockswap's, around every call that may
 * wait). */
static void outside(void) {
  while (!g_shm->holding) usleep(1000);
  LWLockAcquire(lock(3), LW_EXCLUSIVE);
  LWLockRelease(lock(3));
}
static void past_the_last_pgproc(void) {
  g_shm->holding = 0;
  pid_t a = backend(0, holder);
  pid_t b = backend(total_procs(), outside);
  int ra = wait_for(a), rb = wait_for(b);
  CHECK(ra == 0 && rb == FAKE_PANIC_EXIT, "process number %d: exit %d (want the PANIC's %d; the holder %d)", total_procs(), rb,
        FAKE_PANIC_EXIT, ra);
}

static int idle(void) {
  MaxBackends = kBackends; /* postgres -C: InitializeMaxBackends, no shared memory */
  int n;
  long bytes = side_area_bytes(NULL, 0, &n);
  printf("side_area idle (%s): %ld bytes in %d mappings\n", variant(), bytes, n);
  CHECK(bytes == 0, "a run that takes no LWLock has %ld bytes of side area in %d mappings", bytes, n);
  return failures == 0 ? 0 : 1;
}

static int server(void) {
  int n;
  long before = side_area_bytes(NULL, 0, &n);
  printf("side_area server (%s): before MaxBackends: %ld bytes in %d mappings\n", variant(), before, n);
  CHECK(before == 0, "%ld bytes of side area in %d mappings before MaxBackends is known", before, n);

  MaxBackends = kBackends;
  max_prepared_xacts = kPrepared;
  create_shared_memory();
  init_locks();
  postmaster_takes_its_locks();
  run_backends("first start");
  long bytes = side_area_bytes(g_shm, sizeof *g_shm, &n);
  long bound = bound_for_records();
  printf("side_area server (%s): %d process numbers: %ld bytes in %d mappings (bound %ld)\n", variant(), total_procs(),
         bytes, n, bound);
  CHECK(bytes <= bound, "%ld bytes of side area for %d process numbers, more than %ld", bytes, total_procs(), bound);

  /* A crash restart: shared memory re-initialised, backends forked again;
   * the side area is the one made at the first start. */
  init_locks();
  postmaster_takes_its_locks();
  run_backends("after a crash restart");
  int n2;
  long again = side_area_bytes(g_shm, sizeof *g_shm, &n2);
  CHECK(again == bytes && n2 == n, "after a crash restart: %ld bytes in %d mappings, was %ld in %d", again, n2, bytes, n);

  past_the_last_pgproc();
  return failures == 0 ? 0 : 1;
}

static long bound_for_records(void) {
  long bound = page_round((long)total_procs() * kRecordBytes) + sysconf(_SC_PAGESIZE);
  return strcmp(variant(), "percid") == 0 ? bound + percid_bytes() : bound;
}

static int standalone(void) {
  MaxBackends = kBackends;
  max_prepared_xacts = kPrepared;
  create_shared_memory();
  init_locks();
  postmaster_takes_its_locks(); /* CreateSharedMemoryAndSemaphores, before InitProcess */
  become(kBackends / 2);        /* InitProcess */
  for (int i = 0; i < 100; ++i) {
    LWLockAcquire(lock(4), LW_EXCLUSIVE);
    LWLockRelease(lock(4));
    LWLockAcquire(lock(5), LW_SHARED);
    LWLockRelease(lock(5));
  }
  int n;
  long bytes = side_area_bytes(g_shm, sizeof *g_shm, &n);
  int percid = strcmp(variant(), "percid") == 0;
  printf("side_area standalone (%s): after its locks: %ld bytes in %d mappings\n", variant(), bytes, n);
  CHECK(percid ? bytes > 0 && bytes <= bound_for_records() : bytes == 0,
        "after locks that cannot wait: %ld bytes in %d mappings (percid maps its blocks at its first main-array lock, others nothing)", bytes, n);
  uint64_t var = 0, now = 0;
  CHECK(LWLockWaitForVar(lock(6), &var, 0, &now), "a free lock's variable wait returns true");
  bytes = side_area_bytes(g_shm, sizeof *g_shm, &n);
  printf("side_area standalone (%s): after a call that may wait: %ld bytes in %d mappings (bound %ld)\n", variant(), bytes, n,
         bound_for_records());
  CHECK(bytes > 0 && bytes <= bound_for_records() && n == 1, "after a call that may wait: %ld bytes in %d mappings", bytes, n);
  return failures == 0 ? 0 : 1;
}

static long vm_size(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmSize: %ld kB", &kb) == 1) break;
  if (f != NULL) fclose(f);
  return kb * 1024;
}

static int nomem(void) {
  MaxBackends = (1 << 18) - 1; /* MAX_BACKENDS: about 29 MiB of records */
  max_prepared_xacts = (1 << 18) - 1;
  create_shared_memory();
  init_locks();
  struct rlimit lim = {(rlim_t)vm_size() + 8 * 1024 * 1024, RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &lim) != 0) {
    perror("side_area: setrlimit");
    return 2;
  }
  if (sigsetjmp(fake_error_jump, 1) != 0) {
    printf("side_area nomem (%s): level %d: %s\n", variant(), fake_error_level, fake_error_text);
    CHECK(fake_error_level == FAKE_FATAL, "level %d, not FATAL", fake_error_level);
    CHECK(strstr(fake_error_text, "side area") != NULL, "the message does not name the side area: %s", fake_error_text);
    return failures == 0 ? 0 : 1;
  }
  postmaster_takes_its_locks(); /* percid makes the area at its first block */
  pid_t pid = fork();           /* every other variant before the first fork */
  if (pid == 0) _exit(0);
  if (pid > 0) wait_for(pid);
  CHECK(0, "the postmaster forked a backend (pid %d) without a side area and without an error", (int)pid);
  return 1;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  const char* mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "idle") == 0) return idle();
  if (strcmp(mode, "server") == 0) return server();
  if (strcmp(mode, "nomem") == 0) return nomem();
  if (strcmp(mode, "standalone") == 0) return standalone();
  fprintf(stderr, "usage: side_area idle|server|standalone|nomem\n");
  return 2;
}
