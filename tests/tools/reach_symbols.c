/* tests/tools/reach_symbols.c — never run: its symbols (PostgreSQL's names for a spinlock's
 * backoff and a plain timed sleep) are what reach_test.py's generated PostgreSQL-like dump
 * points into, so that `lockswap report` must recognise the spin delay by its frames. */
#include <stdio.h>
#include <sys/select.h>

__attribute__((noinline)) void pg_usleep(long us) {
  struct timeval tv = {us / 1000000, us % 1000000};
  (void)select(0, NULL, NULL, NULL, &tv);
}
__attribute__((noinline)) void perform_spin_delay(int *delay) { pg_usleep(*delay); }
__attribute__((noinline)) int s_lock(volatile int *lock, const char *file, int line, const char *func) {
  int delay = 1000;
  while (__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE)) perform_spin_delay(&delay);
  (void)file, (void)line, (void)func;
  return 0;
}
__attribute__((noinline)) void vacuum_delay_point(void) { pg_usleep(1000); }
__attribute__((noinline)) void WaitEventSetWait(void) { puts("idle"); }

int main(int argc, char **argv) {
  static volatile int lock;
  if (argc > 5) {   /* never taken in the tests: keeps every function */
    s_lock(&lock, argv[0], argc, argv[1]);
    vacuum_delay_point();
    WaitEventSetWait();
  }
  return 0;
}
