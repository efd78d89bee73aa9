/* examples/servers/ycsb_wt.c — YCSB workload A (50% reads, 50% updates,
 * zipfian key popularity) against the WiredTiger C API, the storage engine of
 * mongod. Multi-threaded: one WT_SESSION and cursor per thread, as mongod
 * keeps one per client operation; every update is its own auto-committed
 * transaction, logged (not synced at commit, as mongod's journal) with
 * checkpoints in the background.
 *
 *   ycsb_wt -h DIR -l [-n RECORDS] [-v VALUE_BYTES]           load (bulk, then close)
 *   ycsb_wt -h DIR [-n RECORDS] [-v VALUE_BYTES] [-t THREADS] [-d SECONDS]
 *           [-w WARMUP_S] [-r READ_PERCENT] [-c CACHE_MB] [-z THETA] [-V]
 * Defaults: 100000 records of 1000 bytes (YCSB's 10 fields x 100 bytes),
 * 8 threads, 10 s (+2 s warm-up), 50% reads, cache 128 MB, zipfian 0.99.
 * -V: after the run, WT_SESSION::verify of the table and a full scan that
 * must find every record with a value of the right length.
 *
 * Keys: "user" + 12 digits. The request generator is YCSB's scrambled
 * zipfian: a zipfian rank (Gray et al., as YCSB's ZipfianGenerator) hashed
 * with FNV-1a 64 onto the key space, so the hot keys are spread over the
 * tree rather than packed in one leaf.
 *
 * Output (stdout, one line):
 *   ycsb_wt ok threads=T records=N seconds=S ops=.. ops_per_s=.. reads=..
 *     updates=.. p50_us=.. p95_us=.. p99_us=.. read_p95_us=.. update_p95_us=..
 *     rollbacks=.. errors=.. verify=ok|FAIL|-
 * Exit status 0 when no operation failed (a WT_ROLLBACK is retried and only
 * counted) and -V, if given, passed; 1 otherwise; 2 for bad arguments. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <wiredtiger.h>

#define TABLE "table:usertable"
#define KEYLEN 32 /* "user" + 12 (up to 20) digits + NUL */
#define NBUCKETS (64 + 40 * 32)

static const char *home;
static uint64_t nrecords = 100000;
static int value_bytes = 1000, nthreads = 8, seconds = 10, warmup = 2, read_pct = 50, cache_mb = 128;
static double theta = 0.99;
static WT_CONNECTION *conn;
static int phase; /* 0 warm-up, 1 measured, 2 stop */

/* zipfian constants (YCSB ZipfianGenerator) */
static double zetan, zeta2, alpha, eta;

static void die(const char *what, int ret) {
  fprintf(stderr, "ycsb_wt: %s: %s\n", what, ret ? wiredtiger_strerror(ret) : strerror(errno));
  exit(1);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}
static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }

static uint64_t fnv1a64(uint64_t v) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (int i = 0; i < 8; i++) {
    h ^= v & 0xff;
    h *= 0x100000001B3ULL;
    v >>= 8;
  }
  return h;
}

static void zipf_init(uint64_t n) {
  zetan = 0;
  for (uint64_t i = 1; i <= n; i++) zetan += 1.0 / pow((double)i, theta);
  zeta2 = 1.0 + 1.0 / pow(2.0, theta);
  alpha = 1.0 / (1.0 - theta);
  eta = (1.0 - pow(2.0 / (double)n, 1.0 - theta)) / (1.0 - zeta2 / zetan);
}

static uint64_t next_key(uint64_t *s) {
  double u = rng_unit(s), uz = u * zetan;
  uint64_t rank;
  if (uz < 1.0)
    rank = 0;
  else if (uz < 1.0 + pow(0.5, theta))
    rank = 1;
  else
    rank = (uint64_t)((double)nrecords * pow(eta * u - eta + 1.0, alpha));
  if (rank >= nrecords) rank = nrecords - 1;
  return fnv1a64(rank) % nrecords;
}

static void make_key(char *buf, uint64_t k) { snprintf(buf, KEYLEN, "user%012" PRIu64, k); }

/* latency histogram: exact below 64 ns, then 32 sub-buckets per power of two */
static int bucket(uint64_t v) {
  if (v < 64) return (int)v;
  int msb = 63 - __builtin_clzll(v);
  if (msb > 45) msb = 45, v = (1ULL << 46) - 1;
  return 64 + (msb - 6) * 32 + (int)((v >> (msb - 5)) & 31);
}
static double bucket_mid(int b) {
  if (b < 64) return b;
  int msb = (b - 64) / 32 + 6, sub = (b - 64) % 32;
  double lo = (double)((32ULL + (uint64_t)sub) << (msb - 5)), w = (double)(1ULL << (msb - 5));
  return lo + w / 2;
}
static double percentile_us(const uint64_t *h, double p) {
  uint64_t n = 0, s = 0;
  for (int i = 0; i < NBUCKETS; i++) n += h[i];
  if (!n) return 0;
  double want = p * (double)n;
  for (int i = 0; i < NBUCKETS; i++) {
    s += h[i];
    if ((double)s >= want) return bucket_mid(i) / 1000.0;
  }
  return bucket_mid(NBUCKETS - 1) / 1000.0;
}

struct worker {
  pthread_t tid;
  int id;
  uint64_t reads, updates, rollbacks, errors;
  uint64_t hist_read[NBUCKETS], hist_update[NBUCKETS];
};

static void *worker_main(void *arg) {
  struct worker *w = arg;
  WT_SESSION *session;
  WT_CURSOR *cursor;
  int ret;
  if ((ret = conn->open_session(conn, NULL, NULL, &session)) != 0) die("open_session", ret);
  if ((ret = session->open_cursor(session, TABLE, NULL, NULL, &cursor)) != 0) die("open_cursor", ret);
  uint64_t seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(w->id + 1) ^ now_ns();
  char key[KEYLEN], *value = malloc((size_t)value_bytes + 1);
  if (!value) die("malloc", 0);
  for (int i = 0; i < value_bytes; i++) value[i] = (char)('a' + (w->id + i) % 26);
  value[value_bytes] = '\0';
  for (;;) {
    int ph = __atomic_load_n(&phase, __ATOMIC_RELAXED);
    if (ph == 2) break;
    make_key(key, next_key(&seed));
    int is_read = (int)(rng_next(&seed) % 100) < read_pct;
    uint64_t t0 = now_ns();
    if (is_read) {
      const char *v;
      cursor->set_key(cursor, key);
      ret = cursor->search(cursor);
      if (ret == 0) ret = cursor->get_value(cursor, &v);
      if (ret == 0 && strlen(v) != (size_t)value_bytes) ret = EINVAL;
      cursor->reset(cursor);
    } else {
      value[(t0 >> 4) % (uint64_t)value_bytes] = (char)('a' + (t0 >> 8) % 26);
      for (int tries = 0;; tries++) {
        cursor->set_key(cursor, key);
        cursor->set_value(cursor, value);
        ret = cursor->update(cursor);
        if (ret != WT_ROLLBACK || tries == 1000) break;
        if (ph == 1) w->rollbacks++;
        cursor->reset(cursor);
      }
      cursor->reset(cursor);
    }
    uint64_t dt = now_ns() - t0;
    if (ret != 0) {
      if (w->errors++ < 5) fprintf(stderr, "ycsb_wt: %s %s: %s\n", is_read ? "read" : "update", key,
                                   wiredtiger_strerror(ret));
      continue;
    }
    if (ph != 1) continue;
    if (is_read) {
      w->reads++;
      w->hist_read[bucket(dt)]++;
    } else {
      w->updates++;
      w->hist_update[bucket(dt)]++;
    }
  }
  free(value);
  session->close(session, NULL);
  return NULL;
}

static const char *open_config(int create) {
  static char cfg[512];
  snprintf(cfg, sizeof cfg,
           "%scache_size=%dMB,session_max=%d,eviction=(threads_min=4,threads_max=4),"
           "log=(enabled=true,file_max=32MB),transaction_sync=(enabled=false),checkpoint=(wait=60),"
           "file_manager=(close_idle_time=100000),statistics=(none)",
           create ? "create," : "", cache_mb, nthreads + 20);
  return cfg;
}

static int do_load(void) {
  WT_SESSION *s;
  WT_CURSOR *c;
  int ret;
  char key[KEYLEN], *value = malloc((size_t)value_bytes + 1);
  if (!value) die("malloc", 0);
  memset(value, 'x', (size_t)value_bytes);
  value[value_bytes] = '\0';
  if ((ret = wiredtiger_open(home, NULL, open_config(1), &conn)) != 0) die("wiredtiger_open", ret);
  if ((ret = conn->open_session(conn, NULL, NULL, &s)) != 0) die("open_session", ret);
  if ((ret = s->create(s, TABLE, "key_format=S,value_format=S")) != 0) die("create", ret);
  if ((ret = s->open_cursor(s, TABLE, NULL, "bulk", &c)) != 0) die("open_cursor bulk", ret);
  for (uint64_t k = 0; k < nrecords; k++) { /* keys are zero-padded: numeric order is key order */
    make_key(key, k);
    c->set_key(c, key);
    c->set_value(c, value);
    if ((ret = c->insert(c)) != 0) die("bulk insert", ret);
  }
  c->close(c);
  if ((ret = s->checkpoint(s, NULL)) != 0) die("checkpoint", ret);
  if ((ret = conn->close(conn, NULL)) != 0) die("close", ret);
  printf("ycsb_wt loaded records=%" PRIu64 " value_bytes=%d\n", nrecords, value_bytes);
  free(value);
  return 0;
}

static const char *verify(void) {
  WT_SESSION *s;
  WT_CURSOR *c;
  int ret;
  uint64_t n = 0, bad = 0;
  if ((ret = conn->open_session(conn, NULL, NULL, &s)) != 0) die("open_session", ret);
  if ((ret = s->verify(s, TABLE, NULL)) != 0) {
    fprintf(stderr, "ycsb_wt: verify: %s\n", wiredtiger_strerror(ret));
    s->close(s, NULL);
    return "FAIL";
  }
  if ((ret = s->open_cursor(s, TABLE, NULL, NULL, &c)) != 0) die("open_cursor", ret);
  while ((ret = c->next(c)) == 0) {
    const char *k, *v;
    char want[KEYLEN];
    c->get_key(c, &k);
    c->get_value(c, &v);
    make_key(want, n);
    if (strcmp(k, want) != 0 || strlen(v) != (size_t)value_bytes) bad++;
    n++;
  }
  s->close(s, NULL);
  if (ret != WT_NOTFOUND || n != nrecords || bad) {
    fprintf(stderr, "ycsb_wt: scan: %" PRIu64 " records (want %" PRIu64 "), %" PRIu64 " bad, last: %s\n", n,
            nrecords, bad, ret == WT_NOTFOUND ? "end" : wiredtiger_strerror(ret));
    return "FAIL";
  }
  return "ok";
}

static int do_run(int check) {
  int ret;
  if ((ret = wiredtiger_open(home, NULL, open_config(0), &conn)) != 0) die("wiredtiger_open", ret);
  zipf_init(nrecords);
  struct worker *ws = calloc((size_t)nthreads, sizeof *ws);
  if (!ws) die("calloc", 0);
  for (int i = 0; i < nthreads; i++) {
    ws[i].id = i;
    if ((errno = pthread_create(&ws[i].tid, NULL, worker_main, &ws[i])) != 0) die("pthread_create", 0);
  }
  struct timespec ts = {warmup, 0};
  nanosleep(&ts, NULL);
  uint64_t t0 = now_ns();
  __atomic_store_n(&phase, 1, __ATOMIC_RELAXED);
  ts.tv_sec = seconds;
  nanosleep(&ts, NULL);
  __atomic_store_n(&phase, 2, __ATOMIC_RELAXED);
  double secs = (double)(now_ns() - t0) / 1e9;
  static uint64_t hr[NBUCKETS], hu[NBUCKETS], ha[NBUCKETS];
  uint64_t reads = 0, updates = 0, rollbacks = 0, errors = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(ws[i].tid, NULL);
    reads += ws[i].reads, updates += ws[i].updates, rollbacks += ws[i].rollbacks, errors += ws[i].errors;
    for (int b = 0; b < NBUCKETS; b++) {
      hr[b] += ws[i].hist_read[b], hu[b] += ws[i].hist_update[b];
      ha[b] += ws[i].hist_read[b] + ws[i].hist_update[b];
    }
  }
  const char *v = check ? verify() : "-";
  if ((ret = conn->close(conn, NULL)) != 0) die("close", ret);
  uint64_t ops = reads + updates;
  printf("ycsb_wt %s threads=%d records=%" PRIu64 " seconds=%.2f ops=%" PRIu64 " ops_per_s=%.0f reads=%" PRIu64
         " updates=%" PRIu64 " p50_us=%.1f p95_us=%.1f p99_us=%.1f read_p95_us=%.1f update_p95_us=%.1f"
         " rollbacks=%" PRIu64 " errors=%" PRIu64 " verify=%s\n",
         errors || strcmp(v, "FAIL") == 0 ? "FAIL" : "ok", nthreads, nrecords, secs, ops, (double)ops / secs, reads,
         updates, percentile_us(ha, 0.50), percentile_us(ha, 0.95), percentile_us(ha, 0.99),
         percentile_us(hr, 0.95), percentile_us(hu, 0.95), rollbacks, errors, v);
  free(ws);
  return errors || strcmp(v, "FAIL") == 0;
}

static long arg_num(const char *s, long lo, long hi, char opt) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < lo || v > hi) {
    fprintf(stderr, "ycsb_wt: -%c %s: expected %ld..%ld\n", opt, s, lo, hi);
    exit(2);
  }
  return v;
}

int main(int argc, char **argv) {
  int opt, load = 0, check = 0;
  while ((opt = getopt(argc, argv, "h:ln:v:t:d:w:r:c:z:V")) != -1) {
    switch (opt) {
    case 'h': home = optarg; break;
    case 'l': load = 1; break;
    case 'n': nrecords = (uint64_t)arg_num(optarg, 1, 1000000000, 'n'); break;
    case 'v': value_bytes = (int)arg_num(optarg, 1, 1 << 20, 'v'); break;
    case 't': nthreads = (int)arg_num(optarg, 1, 1024, 't'); break;
    case 'd': seconds = (int)arg_num(optarg, 1, 86400, 'd'); break;
    case 'w': warmup = (int)arg_num(optarg, 0, 86400, 'w'); break;
    case 'r': read_pct = (int)arg_num(optarg, 0, 100, 'r'); break;
    case 'c': cache_mb = (int)arg_num(optarg, 1, 1 << 20, 'c'); break;
    case 'z': theta = atof(optarg); if (theta <= 0 || theta >= 1) { fprintf(stderr, "ycsb_wt: -z in (0,1)\n"); return 2; } break;
    case 'V': check = 1; break;
    default: fprintf(stderr, "usage: see the comment at the top of ycsb_wt.c\n"); return 2;
    }
  }
  if (!home) {
    fprintf(stderr, "ycsb_wt: -h DIR is required\n");
    return 2;
  }
  return load ? do_load() : do_run(check);
}
