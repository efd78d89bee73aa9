/* tests/behaviour/alloc_early_keys.c — a library whose constructor creates
 * ALLOC_TEST_EARLY_KEYS pthread keys before liblockswap.so's constructor runs
 * (the program's DT_NEEDED libraries are initialised before the LD_PRELOADed
 * one), so that lockswap's own key is past glibc's inline keys. */
#include <pthread.h>
#include <stdlib.h>

static int made;

__attribute__((constructor)) static void create_early_keys(void) {
  const char* n = getenv("ALLOC_TEST_EARLY_KEYS");
  for (int i = n ? atoi(n) : 0; i > 0; --i) {
    pthread_key_t k;
    if (pthread_key_create(&k, NULL) != 0) break;
    ++made;
  }
}

int alloc_early_keys_made(void) { return made; }
