// tests/behaviour/secure_guest.c — linked against liblockswap (not preloaded:
// the loader ignores LD_PRELOAD paths in secure-execution mode), so lockswap
// runs inside a setuid process. Takes a lock, then prints whether the process
// is in secure-execution mode and whether liblockswap is mapped.
// Driven by tests/behaviour/secure_stats.sh.
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>

static int lockswap_mapped(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[4096];
  int found = 0;
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (strstr(line, "liblockswap") != NULL) found = 1;
  if (f != NULL) fclose(f);
  return found;
}

int main(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&m);
  pthread_mutex_unlock(&m);
  printf("secure=%lu lockswap=%d\n", getauxval(AT_SECURE), lockswap_mapped());
  return 0;
}
