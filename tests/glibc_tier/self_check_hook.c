/* tests/glibc_tier/self_check_hook.c — defines lockswap's start-up self-check
 * test hook (preload/self_check.cpp) when preloaded in front of
 * liblockswap.so, for self_check.sh:
 *   SELF_CHECK_FAULT=<fact>  that fact's check expects a wrong value, as if
 *                            glibc differed there;
 *   SELF_CHECK_TRACE=1       once every fact has passed, one stderr line per
 *                            fact checked, with when its check began, and the
 *                            total: nanoseconds since the first began, taken
 *                            as the hook returns, and written at the end, so
 *                            that the hook's own work is not timed.
 * (Not LOCKSWAP_*: lockswap refuses names it does not know.) No stdio: it
 * runs inside lockswap's start-up, before main. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_FACTS 32

static const char* facts[MAX_FACTS];
static unsigned long long began_ns[MAX_FACTS];
static int seen;

static void say(const char* s) { (void)!write(2, s, strlen(s)); }

static void say_number(unsigned long long v) {
  char text[24];
  size_t n = sizeof text;
  do text[--n] = (char)('0' + v % 10); while ((v /= 10) != 0);
  (void)!write(2, text + n, sizeof text - n);
}

static unsigned long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

static void say_trace(unsigned long long end_ns) {
  for (int i = 0; i < seen; ++i) {
    say("self-check: ");
    say(facts[i]);
    say(" at ");
    say_number(began_ns[i] - began_ns[0]);
    say(" ns\n");
  }
  say("self-check: passed in ");
  say_number(end_ns - began_ns[0]);
  say(" ns\n");
}

int lockswap_test_self_check(const char* fact) {
  if (fact == NULL) {
    unsigned long long now = now_ns();
    const char* trace = getenv("SELF_CHECK_TRACE");
    if (trace != NULL && strcmp(trace, "1") == 0 && seen > 0) say_trace(now);
    return 0;
  }
  const char* fault = getenv("SELF_CHECK_FAULT");
  int wrong = fault != NULL && strcmp(fault, fact) == 0;
  if (seen < MAX_FACTS) {
    facts[seen] = fact;
    began_ns[seen] = 0;
    began_ns[seen++] = now_ns();  // last: the hook's own work is not timed
  }
  return wrong;
}
