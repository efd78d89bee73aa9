/* tests/wtlock/dlopen_local.c — WiredTiger dlopen()ed without RTLD_GLOBAL,
 * as Python extension modules load their libraries, under every
 * LOCKSWAP_WTLOCK value (docs/wtlock.md, "Where WiredTiger is found").
 *
 *   dlopen_local now|lazy LIB          one copy, RTLD_NOW or RTLD_LAZY, RTLD_LOCAL
 *   dlopen_local now|lazy LIB copy     LIB and a copy of its file under another
 *                                      name: two WiredTigers in one process,
 *                                      each RTLD_LOCAL, each with its own
 *                                      connection, worked on at once
 *
 * WiredTiger's PLT calls of its __wt_rwlock_* functions bind to lockswap's
 * exports; lockswap must then find the WiredTiger that called (its local
 * scope, not the global one) for `off` and `wt`, and check that one's
 * version for the others. Per connection: a table created, THREADS threads
 * with a session each inserting ROWS rows and reading every one back, a
 * checkpoint (the schema and checkpoint locks), the connection closed.
 * Exit 0 when every row read back is the one written. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/wtlock/wt_harness.h"

#define THREADS 4
#define ROWS 2000
#define MAX_COPIES 2

typedef int (*open_fn)(const char*, WT_EVENT_HANDLER*, const char*, WT_CONNECTION**);

struct copy {
  void* handle;
  wt_test_db db;
};

struct work {
  WT_CONNECTION* conn;
  int tid;
  int failed;
};

static int check(int rc, const char* what) {
  if (rc != 0) fprintf(stderr, "dlopen_local: %s: %d\n", what, rc);
  return rc;
}

static void* worker(void* arg) {
  struct work* w = arg;
  WT_SESSION* s = NULL;
  WT_CURSOR* c = NULL;
  w->failed = 1;
  if (check(w->conn->open_session(w->conn, NULL, NULL, &s), "open_session")) return NULL;
  if (check(s->open_cursor(s, "table:rows", NULL, NULL, &c), "open_cursor")) return NULL;
  int64_t base = (int64_t)w->tid * 1000000;
  for (int64_t i = 0; i < ROWS; ++i) {
    c->set_key(c, base + i);
    c->set_value(c, (base + i) * 3 + 1);
    if (check(c->insert(c), "insert")) return NULL;
  }
  for (int64_t i = 0; i < ROWS; ++i) {
    int64_t v = 0;
    c->set_key(c, base + i);
    if (check(c->search(c), "search")) return NULL;
    if (check(c->get_value(c, &v), "get_value")) return NULL;
    if (v != (base + i) * 3 + 1) {
      fprintf(stderr, "dlopen_local: row %lld reads %lld\n", (long long)(base + i), (long long)v);
      return NULL;
    }
    c->reset(c);
  }
  if (check(c->close(c), "cursor close") || check(s->close(s, NULL), "session close")) return NULL;
  w->failed = 0;
  return NULL;
}

/* A copy of `from`'s file in a fresh directory: the dynamic linker loads it
 * as a second object (another path, another inode), not as `from` again. */
static int copy_file(const char* from, char* to, size_t size) {
  char dir[] = "/tmp/lockswap-wtcopy-XXXXXX";
  if (mkdtemp(dir) == NULL) return -1;
  snprintf(to, size, "%s/libwiredtiger-copy.so", dir);
  int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_EXCL, 0755);
  if (in < 0 || out < 0) return -1;
  char buf[65536];
  ssize_t n;
  while ((n = read(in, buf, sizeof buf)) > 0)
    if (write(out, buf, (size_t)n) != n) return -1;
  close(in);
  return close(out) == 0 && n == 0 ? 0 : -1;
}

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4 || (strcmp(argv[1], "now") != 0 && strcmp(argv[1], "lazy") != 0) ||
      (argc == 4 && strcmp(argv[3], "copy") != 0)) {
    fprintf(stderr, "usage: dlopen_local now|lazy LIB [copy]\n");
    return 2;
  }
  int mode = (strcmp(argv[1], "now") == 0 ? RTLD_NOW : RTLD_LAZY) | RTLD_LOCAL;
  char second[128] = "";
  const char* libs[MAX_COPIES] = {argv[2], NULL};
  int copies = 1;
  if (argc == 4) {
    if (copy_file(argv[2], second, sizeof second) != 0) {
      fprintf(stderr, "dlopen_local: cannot copy %s\n", argv[2]);
      return 1;
    }
    libs[copies++] = second;
  }

  struct copy cs[MAX_COPIES];
  memset(cs, 0, sizeof cs);
  for (int i = 0; i < copies; ++i) {
    if ((cs[i].handle = dlopen(libs[i], mode)) == NULL) {
      fprintf(stderr, "dlopen_local: %s\n", dlerror());
      return 1;
    }
    open_fn open_conn = (open_fn)dlsym(cs[i].handle, "wiredtiger_open");
    /* RTLD_LOCAL: nothing of WiredTiger's is in the global scope. */
    if (open_conn == NULL || dlsym(RTLD_DEFAULT, "wiredtiger_open") != NULL) {
      fprintf(stderr, "dlopen_local: %s: wiredtiger_open not local to its handle\n", libs[i]);
      return 1;
    }
    strcpy(cs[i].db.home, "/tmp/lockswap-wtlock-XXXXXX");
    if (mkdtemp(cs[i].db.home) == NULL) return 1;
    if (check(open_conn(cs[i].db.home, NULL, "create", &cs[i].db.conn), "wiredtiger_open")) return 1;
    WT_SESSION* s = NULL;
    if (check(cs[i].db.conn->open_session(cs[i].db.conn, NULL, NULL, &s), "open_session") ||
        check(s->create(s, "table:rows", "key_format=q,value_format=q"), "create") || check(s->close(s, NULL), "close"))
      return 1;
  }
  if (copies == 2 && dlsym(cs[0].handle, "wiredtiger_open") == dlsym(cs[1].handle, "wiredtiger_open")) {
    fprintf(stderr, "dlopen_local: the copy was not loaded as a second object\n");
    return 1;
  }

  /* Every connection worked on at once: THREADS threads each. */
  struct work w[MAX_COPIES][THREADS];
  pthread_t t[MAX_COPIES][THREADS];
  for (int i = 0; i < copies; ++i)
    for (int j = 0; j < THREADS; ++j) {
      w[i][j] = (struct work){cs[i].db.conn, j, 1};
      pthread_create(&t[i][j], NULL, worker, &w[i][j]);
    }
  int failed = 0;
  for (int i = 0; i < copies; ++i)
    for (int j = 0; j < THREADS; ++j) pthread_join(t[i][j], NULL), failed |= w[i][j].failed;

  for (int i = 0; i < copies; ++i) {
    WT_SESSION* s = NULL;
    if (check(cs[i].db.conn->open_session(cs[i].db.conn, NULL, NULL, &s), "open_session") ||
        check(s->checkpoint(s, NULL), "checkpoint") || check(s->close(s, NULL), "close"))
      failed = 1;
    wt_test_close(&cs[i].db);
  }
  if (second[0] != '\0') {
    unlink(second);
    *strrchr(second, '/') = '\0';
    rmdir(second);
  }
  printf("dlopen_local: LOCKSWAP_WTLOCK=%s, %s|RTLD_LOCAL, %d WiredTiger(s): %s\n", wt_test_variant(), argv[1],
         copies, failed ? "FAILED" : "every row read back");
  return failed ? 1 : 0;
}
