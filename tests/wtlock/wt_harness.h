/* tests/wtlock/wt_harness.h — what the WiredTiger rwlock tests share: the
 * __wt_* prototypes (WiredTiger's installed header does not declare them),
 * a lock object of WT_RWLOCK's size and alignment, and a real connection in
 * a temporary directory with one session per thread.
 *
 * WiredTiger 3.2's struct __wt_rwlock is 40 bytes, 8-aligned (docs/wtlock.md):
 * a test lock is that many bytes, never WiredTiger's struct itself, so the
 * tests hold only to what every variant promises. A WT_SESSION* is the
 * WT_SESSION_IMPL* the functions take. C and C++. */
#ifndef LOCKSWAP_TESTS_WT_HARNESS_H
#define LOCKSWAP_TESTS_WT_HARNESS_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wiredtiger.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WT_TEST_RWLOCK_BYTES 40
#define WT_TEST_STAT_OFFSETS_AT 8
#define WT_TEST_COND_READERS_AT 0x18

typedef struct {
  unsigned char bytes[WT_TEST_RWLOCK_BYTES];
} __attribute__((aligned(8))) wt_test_rwlock;

int __wt_rwlock_init(WT_SESSION* session, wt_test_rwlock* l);
void __wt_rwlock_destroy(WT_SESSION* session, wt_test_rwlock* l);
void __wt_readlock(WT_SESSION* session, wt_test_rwlock* l);
int __wt_try_readlock(WT_SESSION* session, wt_test_rwlock* l);
void __wt_readunlock(WT_SESSION* session, wt_test_rwlock* l);
void __wt_writelock(WT_SESSION* session, wt_test_rwlock* l);
int __wt_try_writelock(WT_SESSION* session, wt_test_rwlock* l);
void __wt_writeunlock(WT_SESSION* session, wt_test_rwlock* l);

/* A connection in a fresh temporary directory (removed by wt_test_close). */
typedef struct {
  char home[64];
  WT_CONNECTION* conn;
} wt_test_db;

static inline int wt_test_open(wt_test_db* db) {
  strcpy(db->home, "/tmp/lockswap-wtlock-XXXXXX");
  if (mkdtemp(db->home) == NULL) return -1;
  return wiredtiger_open(db->home, NULL, "create", &db->conn);
}

static inline WT_SESSION* wt_test_session(wt_test_db* db) {
  WT_SESSION* s = NULL;
  if (db->conn->open_session(db->conn, NULL, NULL, &s) != 0) return NULL;
  return s;
}

static inline void wt_test_close(wt_test_db* db) {
  char cmd[96];
  if (db->conn != NULL) db->conn->close(db->conn, NULL);
  db->conn = NULL;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", db->home);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", db->home);
}

/* LOCKSWAP_WTLOCK as the test was started with ("off" when unset). */
static inline const char* wt_test_variant(void) {
  const char* v = getenv("LOCKSWAP_WTLOCK");
  return v != NULL && *v != '\0' ? v : "off";
}
/* WiredTiger's own algorithm runs (off, wt): it allocates two condition
 * variables per lock and cannot take a zero-filled lock under contention. */
static inline int wt_test_own_algorithm(void) {
  return strcmp(wt_test_variant(), "off") == 0 || strcmp(wt_test_variant(), "wt") == 0;
}

#ifdef __cplusplus
}
#endif
#endif
