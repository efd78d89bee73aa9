// preload/config.cpp — environment parsing: variants and tunables.
//
// Runs before malloc may be usable (a lock taken inside the allocator's own
// initialisation), so it allocates nothing and writes with write(2).
// Every LOCKSWAP_* variable is checked: an unknown name, variant or a
// malformed number stops the program before main with the valid choices,
// never a silent fallback.
#include "preload/config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "core/rwsem.h"

extern char** environ;

namespace lockswap {

Config g_config;

namespace {

// Tunables: X(ENV_NAME, min, max, "meaning", apply-statement using `v`)
#define LOCKSWAP_TUNABLES(X)                                                                        \
  X(LOCKSWAP_RWSEM_HANDOFF_US, 0, 10000000, "waiter age (us) after which rwsem hands off (kernel: 4000)", \
    g_rwsem_tunables.handoff_ns = v * 1000)                                                          \
  X(LOCKSWAP_RWSEM_OWNER_SPIN_US, 0, 1000000, "max us a writer spins on a running writer owner (default 5)",   \
    g_rwsem_tunables.owner_spin_ns = v * 1000)                                                       \
  X(LOCKSWAP_RWSEM_SPIN, 0, 1, "1: writer optimistic spinning (kernel default), 0: off",             \
    g_rwsem_tunables.writer_spin = v != 0)                                                           \
  X(LOCKSWAP_RWSEM_DROP_BIAS, 0, 1, "1: 2016 option, failed fast-path readers drop their bias at once", \
    g_rwsem_tunables.drop_bias_early = v != 0)                                                       \
  X(LOCKSWAP_STATS, 0, 1, "1: print lock event counts at exit (stderr)", g_config.stats = v != 0)

void say(const char* s) { (void)!write(2, s, strlen(s)); }

[[noreturn]] void fail_with_choices(const char* var, const char* value, const char* why) {
  say("lockswap: ");
  say(var);
  say("=");
  say(value);
  say(": ");
  say(why);
  say("\n");
  say("lockswap: valid settings:\n  LOCKSWAP_MUTEX =");
#define X(id, name, type, desc) say(" " name);
  LOCKSWAP_MUTEX_VARIANTS(X)
#undef X
  say("\n  LOCKSWAP_RWLOCK =");
#define X(id, name, type, desc) say(" " name);
  LOCKSWAP_RWLOCK_VARIANTS(X)
#undef X
  say("\n  LOCKSWAP_CID =");
#define X(id, name, type, desc) say(" " name);
  LOCKSWAP_CID_VARIANTS(X)
#undef X
  say("   (concurrency ids for LOCKSWAP_RWLOCK=percid)\n");
#define X(env, lo, hi, meaning, apply) say("  " #env " = " #lo ".." #hi ": " meaning "\n");
  LOCKSWAP_TUNABLES(X)
#undef X
  say("  LOCKSWAP_STATS_FILE = path: write the statistics there instead of stderr\n");
  _exit(2);
}

MutexVariant parse_mutex(const char* s) {
  if (s == nullptr || *s == '\0') return MutexVariant::glibc;
#define X(id, name, type, desc) \
  if (strcmp(s, name) == 0) return MutexVariant::id;
  LOCKSWAP_MUTEX_VARIANTS(X)
#undef X
  fail_with_choices("LOCKSWAP_MUTEX", s, "unknown mutex variant");
}

RwlockVariant parse_rwlock(const char* s) {
  if (s == nullptr || *s == '\0') return RwlockVariant::glibc;
#define X(id, name, type, desc) \
  if (strcmp(s, name) == 0) return RwlockVariant::id;
  LOCKSWAP_RWLOCK_VARIANTS(X)
#undef X
  fail_with_choices("LOCKSWAP_RWLOCK", s, "unknown rwlock variant");
}

CidMode parse_cid(const char* s) {
  if (s == nullptr || *s == '\0') return CidMode::rseq;
#define X(id, name, type, desc) \
  if (strcmp(s, name) == 0) return type;
  LOCKSWAP_CID_VARIANTS(X)
#undef X
  fail_with_choices("LOCKSWAP_CID", s, "unknown concurrency-id allocator");
}

uint64_t parse_number(const char* var, const char* s, uint64_t lo, uint64_t hi) {
  uint64_t v = 0;
  if (*s == '\0') fail_with_choices(var, s, "empty value, expected a number");
  for (const char* p = s; *p; ++p) {
    if (*p < '0' || *p > '9') fail_with_choices(var, s, "not a decimal number");
    if (v > (UINT64_MAX - 9) / 10) fail_with_choices(var, s, "number too large");
    v = v * 10 + static_cast<uint64_t>(*p - '0');
  }
  if (v < lo || v > hi) fail_with_choices(var, s, "out of range");
  return v;
}

bool is_known_name(const char* entry, size_t len) {
  static const char* const known[] = {"LOCKSWAP_MUTEX", "LOCKSWAP_RWLOCK", "LOCKSWAP_CID", "LOCKSWAP_STATS_FILE",
#define X(env, lo, hi, meaning, apply) #env,
                                      LOCKSWAP_TUNABLES(X)
#undef X
  };
  for (const char* k : known)
    if (strlen(k) == len && strncmp(k, entry, len) == 0) return true;
  return false;
}

// A misspelt variable would otherwise be ignored without a word.
void reject_unknown_variables() {
  if (environ == nullptr) return;
  for (char** e = environ; *e; ++e) {
    if (strncmp(*e, "LOCKSWAP_", 9) != 0) continue;
    const char* eq = strchr(*e, '=');
    size_t len = eq ? static_cast<size_t>(eq - *e) : strlen(*e);
    if (!is_known_name(*e, len)) {
      char name[128];
      size_t n = len < sizeof name - 1 ? len : sizeof name - 1;
      memcpy(name, *e, n);
      name[n] = '\0';
      fail_with_choices(name, eq ? eq + 1 : "", "unknown lockswap variable");
    }
  }
}

std::atomic<int> g_loading{0};
}  // namespace

void load_config() {
  // First caller parses; concurrent first callers wait (parsing takes
  // microseconds and cannot block).
  int expected = 0;
  if (!g_loading.compare_exchange_strong(expected, 1)) {
    while (__atomic_load_n(&g_config.rwlock, __ATOMIC_ACQUIRE) == RwlockVariant::unset) sched_yield();
    return;
  }
  reject_unknown_variables();
#define X(env, lo, hi, meaning, apply)                     \
  if (const char* s = secure_getenv(#env)) {               \
    uint64_t v = parse_number(#env, s, lo, hi);            \
    apply;                                                 \
  }
  LOCKSWAP_TUNABLES(X)
#undef X
  g_config.stats_file = secure_getenv("LOCKSWAP_STATS_FILE");
  if (g_config.stats_file && *g_config.stats_file) g_config.stats = true;
  MutexVariant m = parse_mutex(secure_getenv("LOCKSWAP_MUTEX"));
  RwlockVariant r = parse_rwlock(secure_getenv("LOCKSWAP_RWLOCK"));
  g_config.cid = parse_cid(secure_getenv("LOCKSWAP_CID"));
  cid::select(g_config.cid);  // before the first fork: global maps its shared page here
  __atomic_store_n(&g_config.mutex, m, __ATOMIC_RELEASE);
  __atomic_store_n(&g_config.rwlock, r, __ATOMIC_RELEASE);
}

const char* mutex_variant_name(MutexVariant v) {
  switch (v) {
#define X(id, name, type, desc) \
  case MutexVariant::id:        \
    return name;
    LOCKSWAP_MUTEX_VARIANTS(X)
#undef X
    default:
      return "unset";
  }
}

const char* cid_variant_name(CidMode m) {
  switch (m) {
#define X(id, name, type, desc) \
  case type:                    \
    return name;
    LOCKSWAP_CID_VARIANTS(X)
#undef X
    default:
      return "unset";
  }
}

const char* rwlock_variant_name(RwlockVariant v) {
  switch (v) {
#define X(id, name, type, desc) \
  case RwlockVariant::id:       \
    return name;
    LOCKSWAP_RWLOCK_VARIANTS(X)
#undef X
    default:
      return "unset";
  }
}

}  // namespace lockswap
