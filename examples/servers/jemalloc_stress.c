// examples/servers/jemalloc_stress.c — multi-threaded allocator stress.
//
// Run it with jemalloc and liblockswap.so preloaded (examples/servers/
// jemalloc.sh): jemalloc's arena, bin, extent and tcache-flush mutexes are
// pthread mutexes, so every one of them then goes through lockswap.
//
// The program itself takes no pthread mutex, rwlock or condition variable
// (threads, atomics and a spin barrier only): any lock event LOCKSWAP_STATS
// reports comes from the allocator.
//
// Each thread allocates random sizes (mostly small, some large, a few huge),
// fills the block with a pattern derived from its address, and publishes it
// by swapping it into a random slot of a shared table; whatever it gets back,
// usually allocated by another thread, it checks and frees (a cross-thread
// free, the case that makes jemalloc take bin and arena locks). Some blocks
// are realloc'ed first. Every block is verified before it is freed.
//
// usage: jemalloc_stress [threads=16] [ops_per_thread=200000] [slots=4096] [seed=1]
// prints one line:  jemalloc_stress ok threads=.. ops=.. cross_frees=.. ... allocator=...
// exit status: 0 ok, 1 corruption or allocation failure, 2 usage.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  void* p;
  size_t size;
  unsigned owner;  // thread that allocated it
} Block;

static unsigned g_threads = 16;
static unsigned long g_ops = 200000;
static unsigned g_slots = 4096;
static unsigned long g_seed = 1;

// Each slot holds a Block* (header allocated alongside the data) or NULL.
static _Atomic(Block*)* g_table;
static atomic_uint g_ready;
static atomic_int g_go;
static atomic_ulong g_bytes;
static atomic_ulong g_cross;
static atomic_int g_failed;

static uint64_t rng_next(uint64_t* s) {  // xorshift64*
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

static unsigned char pattern(const void* p, size_t i) {
  return (unsigned char)(((uintptr_t)p >> 4) ^ (i * 131u));
}

static size_t pick_size(uint64_t* s) {
  uint64_t r = rng_next(s) % 1000;
  if (r < 850) return 8 + rng_next(s) % 512;            // small bins
  if (r < 990) return 512 + rng_next(s) % (32 * 1024);  // larger small / large classes
  return 64 * 1024 + rng_next(s) % (1024 * 1024);       // large extents
}

// Only the first and last 64 bytes are written and checked: enough to catch a
// block handed out twice, without making memset the benchmark.
static void fill(Block* b) {
  unsigned char* c = b->p;
  size_t n = b->size < 64 ? b->size : 64;
  for (size_t i = 0; i < n; ++i) c[i] = pattern(b->p, i);
  for (size_t i = b->size - n; i < b->size; ++i) c[i] = pattern(b->p, i);
}

static int check(const Block* b) {
  const unsigned char* c = b->p;
  size_t n = b->size < 64 ? b->size : 64;
  for (size_t i = 0; i < n; ++i)
    if (c[i] != pattern(b->p, i)) return 0;
  for (size_t i = b->size - n; i < b->size; ++i)
    if (c[i] != pattern(b->p, i)) return 0;
  return 1;
}

static void release(Block* b) {
  if (!check(b)) {
    fprintf(stderr, "jemalloc_stress: corrupted block %p size %zu\n", b->p, b->size);
    atomic_store(&g_failed, 1);
  }
  free(b->p);
  free(b);
}

static void* worker(void* arg) {
  unsigned id = (unsigned)(uintptr_t)arg;
  uint64_t s = g_seed * 0x9E3779B97F4A7C15ULL + id + 1;
  unsigned long cross = 0, bytes = 0;
  atomic_fetch_add(&g_ready, 1);
  while (!atomic_load_explicit(&g_go, memory_order_acquire)) {
  }
  for (unsigned long i = 0; i < g_ops && !atomic_load_explicit(&g_failed, memory_order_relaxed); ++i) {
    Block* b = malloc(sizeof *b);
    if (!b) { atomic_store(&g_failed, 1); break; }
    b->size = pick_size(&s);
    b->owner = id;
    b->p = malloc(b->size);
    if (!b->p) { atomic_store(&g_failed, 1); free(b); break; }
    fill(b);
    if (rng_next(&s) % 16 == 0) {  // grow or shrink in place or by moving
      if (!check(b)) atomic_store(&g_failed, 1);
      size_t n = pick_size(&s);
      void* q = realloc(b->p, n);
      if (!q) { atomic_store(&g_failed, 1); free(b->p); free(b); break; }
      b->p = q;
      b->size = n;
      fill(b);
    }
    bytes += b->size;
    unsigned slot = (unsigned)(rng_next(&s) % g_slots);
    Block* old = atomic_exchange_explicit(&g_table[slot], b, memory_order_acq_rel);
    if (old) {
      if (old->owner != id) ++cross;
      release(old);
    }
  }
  atomic_fetch_add(&g_cross, cross);
  atomic_fetch_add(&g_bytes, bytes);
  return NULL;
}

static const char* allocator_name(char* buf, size_t n) {
  // jemalloc exports mallctl; glibc's malloc does not.
  int (*mallctl)(const char*, void*, size_t*, void*, size_t) =
      (int (*)(const char*, void*, size_t*, void*, size_t))dlsym(RTLD_DEFAULT, "mallctl");
  if (!mallctl) return "glibc-malloc";
  const char* version = NULL;
  size_t len = sizeof version;
  unsigned narenas = 0;
  size_t nlen = sizeof narenas;
  if (mallctl("version", &version, &len, NULL, 0) != 0) version = "?";
  if (mallctl("arenas.narenas", &narenas, &nlen, NULL, 0) != 0) narenas = 0;
  snprintf(buf, n, "jemalloc-%s(narenas=%u)", version, narenas);
  return buf;
}

int main(int argc, char** argv) {
  if (argc > 5 || (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
    fprintf(stderr, "usage: %s [threads=16] [ops_per_thread=200000] [slots=4096] [seed=1]\n", argv[0]);
    return 2;
  }
  if (argc > 1) g_threads = (unsigned)strtoul(argv[1], NULL, 10);
  if (argc > 2) g_ops = strtoul(argv[2], NULL, 10);
  if (argc > 3) g_slots = (unsigned)strtoul(argv[3], NULL, 10);
  if (argc > 4) g_seed = strtoul(argv[4], NULL, 10);
  if (g_threads == 0 || g_threads > 1024 || g_slots == 0) {
    fprintf(stderr, "jemalloc_stress: bad arguments\n");
    return 2;
  }
  g_table = calloc(g_slots, sizeof *g_table);
  pthread_t* t = calloc(g_threads, sizeof *t);
  if (!g_table || !t) return 1;

  struct timespec t0, t1;
  for (unsigned i = 0; i < g_threads; ++i)
    if (pthread_create(&t[i], NULL, worker, (void*)(uintptr_t)i) != 0) {
      fprintf(stderr, "jemalloc_stress: pthread_create failed\n");
      return 1;
    }
  while (atomic_load(&g_ready) != g_threads) {
  }
  clock_gettime(CLOCK_MONOTONIC, &t0);
  atomic_store_explicit(&g_go, 1, memory_order_release);
  for (unsigned i = 0; i < g_threads; ++i) pthread_join(t[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);

  unsigned long left = 0;
  for (unsigned i = 0; i < g_slots; ++i) {
    Block* b = atomic_load(&g_table[i]);
    if (b) {
      ++left;
      release(b);
    }
  }
  free(g_table);
  free(t);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  double ops = (double)g_threads * (double)g_ops;
  char buf[128];
  printf("jemalloc_stress %s threads=%u ops=%.0f seconds=%.3f mops_per_s=%.3f cross_frees=%lu "
         "left_at_exit=%lu mbytes=%lu allocator=%s\n",
         atomic_load(&g_failed) ? "FAILED" : "ok", g_threads, ops, secs, ops / secs / 1e6,
         atomic_load(&g_cross), left, atomic_load(&g_bytes) >> 20, allocator_name(buf, sizeof buf));
  return atomic_load(&g_failed) ? 1 : 0;
}
