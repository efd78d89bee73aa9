/* tests/reach/syscall_diff.c — what syscall() returns and leaves in errno,
 * printed one line per case so that syscall_diff.sh can compare a run under
 * liblockswap (whose syscall() is its own, preload/stats/waits.cpp) with a run on
 * glibc's, with statistics off and on (which times futex waits):
 *
 *   futex wait on a value that differs (EAGAIN), with a timeout (ETIMEDOUT),
 *   an unknown futex command, EINTR from a handler without SA_RESTART, a wake
 *   with nobody waiting, getpid/gettid, a write to a bad descriptor (EBADF),
 *   and a thread with deferred cancellation blocked in a futex wait through
 *   syscall() and cancelled: syscall() is not a cancellation point, so it
 *   stays blocked until woken and the cancellation acts at the next
 *   cancellation point (pthread_testcancel). */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void show(const char* what, long rc, int err) {
  printf("%-28s rc=%ld errno=%s\n", what, rc, rc == -1 ? strerrorname_np(err) : "-");
}

static int g_word;

/* --------------------------------------------------------------- EINTR */

static void on_usr1(int sig) { (void)sig; }
static atomic_int g_eintr_done;
static long g_eintr_rc;
static int g_eintr_errno;

static void* eintr_waiter(void* arg) {
  (void)arg;
  static int word = 0;
  errno = 0;
  g_eintr_rc = syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
  g_eintr_errno = errno;
  atomic_store(&g_eintr_done, 1);
  return NULL;
}

static void eintr_case(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1; /* no SA_RESTART */
  sigaction(SIGUSR1, &sa, NULL);
  pthread_t t;
  pthread_create(&t, NULL, eintr_waiter, NULL);
  while (!atomic_load(&g_eintr_done)) {
    sleep_ms(20);
    pthread_kill(t, SIGUSR1);
  }
  pthread_join(t, NULL);
  show("futex wait, signal", g_eintr_rc, g_eintr_errno);
}

/* -------------------------------------------------------- cancellation */

static atomic_int g_cancel_word;
static atomic_int g_returned;

static void* cancel_waiter(void* arg) {
  (void)arg;
  pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, NULL);
  while (atomic_load(&g_cancel_word) == 0)
    syscall(SYS_futex, &g_cancel_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
  atomic_store(&g_returned, 1);
  pthread_testcancel();
  atomic_store(&g_returned, 2); /* not reached: the cancellation acts above */
  return NULL;
}

static void cancel_case(void) {
  pthread_t t;
  pthread_create(&t, NULL, cancel_waiter, NULL);
  sleep_ms(50);
  pthread_cancel(t);
  sleep_ms(100);
  int blocked_after_cancel = atomic_load(&g_returned) == 0;
  atomic_store(&g_cancel_word, 1);
  syscall(SYS_futex, &g_cancel_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  void* result;
  pthread_join(t, &result);
  printf("cancel: blocked after cancel=%d, returned from syscall=%d, cancelled=%d\n", blocked_after_cancel,
         atomic_load(&g_returned) >= 1, result == PTHREAD_CANCELED);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  long rc;

  g_word = 1;
  errno = 0;
  rc = syscall(SYS_futex, &g_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
  show("futex wait, value differs", rc, errno);

  struct timespec rel = {0, 10 * 1000000L};
  errno = 0;
  rc = syscall(SYS_futex, &g_word, FUTEX_WAIT_PRIVATE, 1, &rel, NULL, 0);
  show("futex wait, timeout", rc, errno);

  struct timespec abs;
  clock_gettime(CLOCK_MONOTONIC, &abs);
  abs.tv_nsec += 10 * 1000000L;
  if (abs.tv_nsec >= 1000000000L) {
    abs.tv_sec += 1;
    abs.tv_nsec -= 1000000000L;
  }
  errno = 0;
  rc = syscall(SYS_futex, &g_word, FUTEX_WAIT_BITSET_PRIVATE, 1, &abs, NULL, FUTEX_BITSET_MATCH_ANY);
  show("futex wait_bitset, timeout", rc, errno);

  errno = 0;
  rc = syscall(SYS_futex, &g_word, 99 | FUTEX_PRIVATE_FLAG, 1, NULL, NULL, 0);
  show("futex bad command", rc, errno);

  errno = 0;
  rc = syscall(SYS_futex, &g_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  show("futex wake, nobody waits", rc, errno);

  errno = 0;
  rc = syscall(SYS_futex, (int*)8, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
  show("futex wait, bad address", rc, errno);

  rc = syscall(SYS_getpid);
  printf("%-28s %s\n", "getpid", rc == getpid() ? "same" : "DIFFERENT");
  rc = syscall(SYS_gettid);
  printf("%-28s %s\n", "gettid", rc == gettid() ? "same" : "DIFFERENT");

  errno = 0;
  rc = syscall(SYS_write, -1, "x", 1);
  show("write, bad descriptor", rc, errno);

  errno = 12345;
  rc = syscall(SYS_getppid);
  printf("%-28s errno kept=%d\n", "getppid (success)", errno == 12345);

  errno = 0;
  rc = syscall(-1L);
  show("unknown system call", rc, errno);

  eintr_case();
  cancel_case();
  return 0;
}
