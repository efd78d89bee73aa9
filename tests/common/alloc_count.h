/* tests/common/alloc_count.h — the allocator the allocation tests run their
 * program on: malloc and its family forward to glibc's __libc_* entry points
 * and count each call a thread makes while it is inside an interposed call
 * (t_inside > 0, raised by the test around each call); with g_serialise set
 * every call also takes a pthread mutex, as some allocators do (a lock path
 * that allocated would then recurse into lockswap). Included by one
 * translation unit of each allocation test (tests/behaviour/alloc_free.c,
 * tests/reach/alloc_waits.c, tests/wtlock/alloc_wtlock.c). */
#ifndef LOCKSWAP_TESTS_ALLOC_COUNT_H
#define LOCKSWAP_TESTS_ALLOC_COUNT_H
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void __libc_free(void*);
extern void* __libc_memalign(size_t, size_t);

static __thread int t_inside;        /* > 0 while inside an interposed call */
static atomic_long g_inside_allocs;  /* allocator calls made meanwhile */
static int g_serialise;              /* the allocator takes g_alloc_mutex */
static pthread_mutex_t g_alloc_mutex = PTHREAD_MUTEX_INITIALIZER;

static void enter_alloc(void) {
  if (t_inside > 0) atomic_fetch_add(&g_inside_allocs, 1);
  if (g_serialise) pthread_mutex_lock(&g_alloc_mutex);
}
static void leave_alloc(void) {
  if (g_serialise) pthread_mutex_unlock(&g_alloc_mutex);
}
#define ALLOC_CALL(expr) \
  do {                   \
    enter_alloc();       \
    r = (expr);          \
    leave_alloc();       \
  } while (0)

/* One call made inside (its result, if any, dropped). */
#define COUNT_INSIDE(call) \
  do {                     \
    ++t_inside;            \
    (void)(call);          \
    --t_inside;            \
  } while (0)

void* malloc(size_t n) { void* r; ALLOC_CALL(__libc_malloc(n)); return r; }
void* calloc(size_t a, size_t b) { void* r; ALLOC_CALL(__libc_calloc(a, b)); return r; }
void* realloc(void* p, size_t n) { void* r; ALLOC_CALL(__libc_realloc(p, n)); return r; }
void* memalign(size_t a, size_t n) { void* r; ALLOC_CALL(__libc_memalign(a, n)); return r; }
void* aligned_alloc(size_t a, size_t n) { return memalign(a, n); }
int posix_memalign(void** out, size_t a, size_t n) {
  void* p = memalign(a, n);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) {
  if (p == NULL) return;
  if (t_inside > 0) atomic_fetch_add(&g_inside_allocs, 1);
  __libc_free(p);
}
#endif
