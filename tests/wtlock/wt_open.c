/* tests/wtlock/wt_open.c — opens and closes a WiredTiger connection in a
 * temporary directory, saying "main reached" on stdout first.
 *
 * Built twice: linked with -lwiredtiger (WiredTiger is loaded before main,
 * so lockswap checks the version in its constructor), and with
 * WT_OPEN_DLOPEN, where main dlopen()s the libraries named on the command
 * line (RTLD_GLOBAL, in order) and the check comes at the first interposed
 * call. Exit 0 when the connection opened and closed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "tests/wtlock/wt_harness.h"

#ifdef WT_OPEN_DLOPEN
typedef int (*open_fn)(const char*, WT_EVENT_HANDLER*, const char*, WT_CONNECTION**);
#endif

int main(int argc, char** argv) {
  printf("main reached\n");
  fflush(stdout);
  wt_test_db db = {{0}, NULL};
  strcpy(db.home, "/tmp/lockswap-wtlock-XXXXXX");
  if (mkdtemp(db.home) == NULL) return 1;
#ifdef WT_OPEN_DLOPEN
  void* h = NULL;
  for (int i = 1; i < argc; ++i)
    if ((h = dlopen(argv[i], RTLD_NOW | RTLD_GLOBAL)) == NULL) {
      fprintf(stderr, "wt_open: %s\n", dlerror());
      return 1;
    }
  open_fn open = h != NULL ? (open_fn)dlsym(h, "wiredtiger_open") : NULL;
  if (open == NULL) return 1;
  int rc = open(db.home, NULL, "create", &db.conn);
#else
  (void)argc, (void)argv;
  int rc = wiredtiger_open(db.home, NULL, "create", &db.conn);
#endif
  if (rc != 0) {
    fprintf(stderr, "wt_open: wiredtiger_open failed: %d\n", rc);
    return 1;
  }
  wt_test_close(&db);
  printf("closed\n");
  return 0;
}
