/* tests/lwlock/fake_postgres.h — a program that looks like PostgreSQL 15 to
 * preload/lwlock/: it exports the LWLock API (entry stubs that trap if they
 * ever run: after redirection none may), MyProc, MaxBackends,
 * max_prepared_xacts, InterruptHoldoffCount, my_wait_event_info, the error
 * functions and GetLWLockIdentifier, and
 * declares itself a synthetic target (preload/lwlock/redirect.cpp), since
 * its build-id is on no allow-list. Included by one translation unit of each
 * test program (C or C++); link with -rdynamic so the dynamic symbol table
 * has these names. */
#ifndef LOCKSWAP_TESTS_FAKE_POSTGRES_H
#define LOCKSWAP_TESTS_FAKE_POSTGRES_H
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The LWLock as PostgreSQL 15 lays it out, in PostgreSQL's free state. */
typedef struct {
  uint16_t tranche;
  uint16_t pad;
  uint32_t state;
  int32_t head, tail;
} FakeLwlock;
enum { LW_EXCLUSIVE = 0, LW_SHARED = 1, LW_WAIT_UNTIL_FREE = 2 };
enum { FAKE_ERROR = 21, FAKE_FATAL = 22, FAKE_PANIC = 23, FAKE_PANIC_EXIT = 42 };
#define FAKE_WAIT_LWLOCK 0x01000000u

/* LWLockPadded: MainLWLockArray's element, one 128-byte line each. */
typedef struct {
  FakeLwlock lock;
  char pad[128 - sizeof(FakeLwlock)];
} FakeLwlockPadded;

static inline void fake_lwlock_init(FakeLwlock* l, uint16_t tranche) {
  l->tranche = tranche;
  l->state = 1u << 29;
  l->head = l->tail = 0x7fffffff;
}

/* A PGPROC whose process number sits where the marker says. */
typedef struct {
  char before[0x48];
  int32_t procno;
} FakeProc;
#ifndef FAKE_POSTGRES_UNLISTED /* a PostgreSQL lockswap has not verified */
extern __attribute__((visibility("default"))) const uint32_t lockswap_lwlock_synthetic_target;
const uint32_t lockswap_lwlock_synthetic_target = offsetof(FakeProc, procno);
#endif

__attribute__((visibility("default"))) void* MyProc;
/* InitializeMaxBackends's result and the prepared-transaction slots: with
 * the auxiliary processes' PGPROCs, the process numbers are 0 ..
 * MaxBackends + FAKE_AUXILIARY_PROCS + max_prepared_xacts - 1 (PostgreSQL
 * 15's InitProcGlobal). Set before any backend is forked, as PostgreSQL sets
 * them before it creates shared memory; a test that plays the start-up
 * itself defines FAKE_MAX_BACKENDS 0 first and sets MaxBackends later. */
#ifndef FAKE_MAX_BACKENDS
#define FAKE_MAX_BACKENDS 100
#endif
enum { FAKE_AUXILIARY_PROCS = 5 };
__attribute__((visibility("default"))) int MaxBackends = FAKE_MAX_BACKENDS;
__attribute__((visibility("default"))) int max_prepared_xacts;
/* The main array (a test points it at its own FakeLwlockPadded array).
 * PostgreSQL 15's CreateLWLocks allocates in one piece: the padded locks,
 * NUM_FIXED_LWLOCKS of them (the individual locks, then the buffer-mapping,
 * lock-manager and predicate-lock partitions), then the locks of the named
 * tranches extensions requested; right after those, NamedLWLockTrancheArray
 * (one entry per request, then the names), set only when a tranche was
 * requested (NamedLWLockTrancheRequests > 0; NULL otherwise). Other LWLocks
 * (the WAL insertion locks, 128-byte aligned) follow in later allocations,
 * a few KiB on. */
#define FAKE_FIXED_LWLOCKS (48 + 128 + 16 + 16)
typedef struct {
  int trancheId;
  char* trancheName;
} FakeNamedTranche;
__attribute__((visibility("default"))) FakeLwlockPadded* MainLWLockArray;
__attribute__((visibility("default"))) FakeNamedTranche* NamedLWLockTrancheArray;
__attribute__((visibility("default"))) int NamedLWLockTrancheRequests;
__attribute__((visibility("default"))) volatile uint32_t InterruptHoldoffCount;
static uint32_t fake_local_wait_event;
__attribute__((visibility("default"))) uint32_t* my_wait_event_info = &fake_local_wait_event;

/* elog: ERROR (and FATAL: a test sees it where PostgreSQL would exit)
 * jumps back to the test (fake_error_jump, armed with sigsetjmp), PANIC
 * leaves the process with FAKE_PANIC_EXIT. */
static int fake_error_level;
static char fake_error_text[256];
static sigjmp_buf fake_error_jump;
__attribute__((visibility("default"))) bool errstart(int level, const char* domain) {
  (void)domain;
  fake_error_level = level;
  return true;
}
__attribute__((visibility("default"))) int errmsg_internal(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fake_error_text, sizeof fake_error_text, fmt, ap);
  va_end(ap);
  return 0;
}
__attribute__((visibility("default"))) void errfinish(const char* file, int line, const char* func) {
  (void)file, (void)line, (void)func;
  if (fake_error_level >= FAKE_PANIC) _exit(FAKE_PANIC_EXIT);
  siglongjmp(fake_error_jump, 1);
}

/* Tranches 0..2 are built in ("Gamma" is named GammaLock in rules too);
 * the rest are an extension's. */
__attribute__((visibility("default"))) const char* GetLWLockIdentifier(uint32_t class_id, uint16_t id) {
  static const char* const names[] = {"Alpha", "Beta", "Gamma"};
  (void)class_id;
#ifdef FAKE_POSTGRES_UNLISTED /* lockswap must not run code of a binary it has not verified */
  fputs("unlisted: GetLWLockIdentifier ran before the build was verified\n", stderr);
  _exit(3);
#endif
  return id < 3 ? names[id] : "extension";
}

bool LWLockAcquire(FakeLwlock* l, int mode);
bool LWLockConditionalAcquire(FakeLwlock* l, int mode);
bool LWLockAcquireOrWait(FakeLwlock* l, int mode);
bool LWLockWaitForVar(FakeLwlock* l, uint64_t* var, uint64_t old, uint64_t* newval);
void LWLockUpdateVar(FakeLwlock* l, uint64_t* var, uint64_t value);
void LWLockRelease(FakeLwlock* l);
void LWLockReleaseClearVar(FakeLwlock* l, uint64_t* var, uint64_t value);
void LWLockReleaseAll(void);
bool LWLockHeldByMe(FakeLwlock* l);
bool LWLockHeldByMeInMode(FakeLwlock* l, int mode);
bool LWLockAnyHeldByMe(FakeLwlock* l, int nlocks, size_t stride);
void ForEachLWLockHeldByMe(void (*callback)(FakeLwlock*, int, void*), void* context);

#ifdef __cplusplus
}
#endif

/* The entry stubs: 32 bytes exported as functions, a frame push as
 * PostgreSQL's own entries start (the instruction lockswap keeps in place,
 * preload/lwlock/entry_patch.h), then a trap (ud2 / brk). */
#if defined(__x86_64__)
#define FAKE_TRAP "push %rbp\n ud2\n .skip 29, 0xcc\n"
#elif defined(__aarch64__)
#define FAKE_TRAP "stp x29, x30, [sp, #-16]!\n brk #0\n .skip 24, 0\n"
#else
#error "no entry stub for this ISA"
#endif
#define FAKE_STUB(name)                                                                                  \
  __asm__(".text\n .globl " #name "\n .type " #name ", %function\n .p2align 4\n" #name ":\n" FAKE_TRAP \
          " .size " #name ", 32\n");
FAKE_STUB(LWLockAcquire)
#ifndef FAKE_POSTGRES_PARTIAL /* a program that exports only part of the API */
FAKE_STUB(LWLockConditionalAcquire)
FAKE_STUB(LWLockAcquireOrWait)
FAKE_STUB(LWLockWaitForVar)
FAKE_STUB(LWLockUpdateVar)
FAKE_STUB(LWLockRelease)
FAKE_STUB(LWLockReleaseClearVar)
FAKE_STUB(LWLockReleaseAll)
FAKE_STUB(LWLockHeldByMe)
FAKE_STUB(LWLockHeldByMeInMode)
FAKE_STUB(LWLockAnyHeldByMe)
FAKE_STUB(ForEachLWLockHeldByMe)
#endif
#endif
