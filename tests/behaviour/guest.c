/* tests/behaviour/guest.c — an ordinary program for the good-guest checks
 * (good_guest.sh): it takes contended locks and prints exactly one line on
 * stdout, so anything else on stdout came from the preloaded library. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static long counter;
static int turns;

static void* worker(void* arg) {
  (void)arg;
  for (int i = 0; i < 20000; ++i) {
    pthread_mutex_lock(&m);
    ++counter;
    pthread_mutex_unlock(&m);
    if (i % 64 == 0) {
      pthread_rwlock_wrlock(&l);
      pthread_rwlock_unlock(&l);
    } else {
      pthread_rwlock_rdlock(&l);
      pthread_rwlock_unlock(&l);
    }
  }
  pthread_mutex_lock(&m);
  ++turns;
  pthread_cond_broadcast(&c);
  pthread_mutex_unlock(&m);
  return NULL;
}

int main(void) {
  pthread_t t[3];
  for (int i = 0; i < 3; ++i) pthread_create(&t[i], NULL, worker, NULL);
  pthread_mutex_lock(&m);
  while (turns < 3) pthread_cond_wait(&c, &m);
  pthread_mutex_unlock(&m);
  for (int i = 0; i < 3; ++i) pthread_join(t[i], NULL);
  if (counter != 60000) {
    fprintf(stderr, "guest: counter %ld, expected 60000\n", counter);
    return 1;
  }
  printf("lockswap good guest: main ran\n");
  return 0;
}
