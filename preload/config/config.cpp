// preload/config/config.cpp — environment parsing: variants and tunables.
// Parsing only: what the choices start is preload/boot.cpp's.
//
// Runs before malloc may be usable (a lock taken inside the allocator's own
// initialisation), so it allocates nothing and writes with write(2) to a
// private duplicate of stderr (diag_fd()).
// Every LOCKSWAP_* variable is checked: an unknown name, variant or a
// malformed number stops the program before main with the valid choices,
// never a silent fallback.
#include "preload/config/config.h"

#include <gnu/libc-version.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "core/lockref.h"
#include "core/nocancel_io.h"
#include "core/oncpu.h"
#include "core/rwsem.h"
#include "preload/diag.h"
#include "preload/config/escape.h"
#include "preload/glibc_facts.h"
#include "preload/config/select.h"
#include "preload/self_check.h"

extern char** environ;

namespace lockswap {

Config g_config;

namespace {

bool g_glibc_unchecked;  // LOCKSWAP_GLIBC_UNCHECKED=1

// Tunables: X(ENV_NAME, min, max, "meaning", apply-statement using `v`)
#define LOCKSWAP_TUNABLES(X)                                                                        \
  X(LOCKSWAP_RWSEM_HANDOFF_US, 0, 10000000, "waiter age (us) after which rwsem hands off (kernel: 4000)", \
    g_rwsem_tunables.handoff_ns = v * 1000)                                                          \
  X(LOCKSWAP_RWSEM_HANDOFF_STRETCH, 1, 1024, "with more threads than CPUs the handoff deadline is multiplied by threads per CPU, up to this (1 = the kernel's fixed deadline; default 16)", \
    g_rwsem_tunables.handoff_stretch_max = static_cast<uint32_t>(v))                                 \
  X(LOCKSWAP_RWSEM_OWNER_SPIN_US, 0, 1000000, "max us one rwsem spin spends on a writer (or no) owner; reader-owned spinning has the kernel's 10-25 us (default 5)",   \
    g_rwsem_tunables.owner_spin_ns = v * 1000)                                                       \
  X(LOCKSWAP_RWSEM_SPIN, 0, 1, "1: writer optimistic spinning (kernel default), reader polls, percid drain spin; 0: off",             \
    g_rwsem_tunables.writer_spin = v != 0)                                                           \
  X(LOCKSWAP_RWSEM_SPINNERS, 0, 4096, "threads of a process that may spin at once (0 = default: its CPUs - 1, at least 1)", \
    g_rwsem_tunables.max_spinners = static_cast<uint32_t>(v))                                        \
  X(LOCKSWAP_RWSEM_READER_PREF_US, 0, 10000000, "us a reader held off by a writer waits on a read-held default-kind rwlock before entering anyway (default 4000)", \
    g_rwsem_tunables.reader_pref_ns = v * 1000)                                                      \
  X(LOCKSWAP_RWSEM_LOST_RACES, 0, 1000000, "a writer's spin ends after seeing the lock released and re-taken by others this often (0 = never, as the kernel; default 1)", \
    g_rwsem_tunables.spin_lost_races = static_cast<uint32_t>(v))                                      \
  X(LOCKSWAP_RWSEM_BARGE, 0, 1, "1 (default): a writer entering the slow path takes a free lock before spinning or queueing; 0: only spinners may (kernel)", \
    g_rwsem_tunables.barge = v != 0)                                                                 \
  X(LOCKSWAP_RWSEM_POLITE_US, 0, 1000000, "us a queued writer of an rwlock that lost the lock to a thread that did not queue, or found it free just before sleeping, leaves it to that thread before retrying (0 = at once, as the kernel; default 50)", \
    g_rwsem_tunables.polite_ns = v * 1000)                                                           \
  X(LOCKSWAP_RWSEM_MUTEX_POLITE_US, 0, 1000000, "LOCKSWAP_RWSEM_POLITE_US for the rwsem mutex (default 500)", \
    g_rwsem_tunables.exclusive_polite_ns = v * 1000)                                                 \
  X(LOCKSWAP_RWSEM_WOKEN_YIELD_US, 0, 1000000, "a writer that has found the woken head writer still without the lock for this many us yields its CPU once before it barges (0 = never, as the kernel; default 1000)", \
    g_rwsem_tunables.woken_yield_ns = v * 1000)                                                      \
  X(LOCKSWAP_RWSEM_STEAL_READ_HELD, 0, 1, "1 (default): on a default-kind rwlock a reader steals a read-held lock past a queued writer, whose head wakes at its handoff deadline to set HANDOFF; 0: kernel rule (no steal from a reader-owned lock)", \
    g_rwsem_tunables.steal_read_held = v != 0)                                                       \
  X(LOCKSWAP_RWSEM_DROP_BIAS, 0, 1, "1: 2016 option, failed fast-path readers drop their bias at once", \
    g_rwsem_tunables.drop_bias_early = v != 0)                                                       \
  X(LOCKSWAP_LOCKREF_RETRIES, 0, 1000000, "lock-free compare-and-swap attempts before a lockref takes its lock (0 = unbounded; kernel: 100)", \
    g_lockref_tunables.retries = static_cast<uint32_t>(v))                                          \
  X(LOCKSWAP_STATS_BACKTRACE, 0, 1000000, "profile: backtrace of a site's first contended acquisition, then 1 in N (0 = none; default 64)", \
    g_config.stats_backtrace = static_cast<uint32_t>(v))                                             \
  X(LOCKSWAP_STATS_LOCK_SLOTS, 64, 32768, "profile, for tests: slots of the per-lock table (rounded down to a power of two; default 32768)", \
    g_config.stats_lock_slots = static_cast<uint32_t>(v))                                            \
  X(LOCKSWAP_ONCPU_STRICT, 0, 1, "0 (set by `lockswap --oncpu`): LOCKSWAP_ONCPU=bpf without its map falls back to rseq with one line on stderr", \
    g_config.oncpu_strict = v != 0)                                                                 \
  X(LOCKSWAP_CID_SWITCH, 0, 1, "1: every thread holds a concurrency id while it runs and gives it up or parks it (per LOCKSWAP_CID) when it blocks in a wait lockswap sees (default 0)", \
    g_config.cid_switch = v != 0)                                                                  \
  X(LOCKSWAP_GLIBC_UNCHECKED, 0, 1, "1: run on a glibc version lockswap has not been checked against (preload/glibc_facts.h), at the risk of corrupted locks", \
    g_glibc_unchecked = v != 0)

// API families (and the concurrency-id allocator of the percid rwlock).
// Read or set by the `lockswap` command and the project's scripts, not by
// the library: accepted and ignored.
#define LOCKSWAP_WRAPPER_VARIABLES(X) \
  X(LOCKSWAP_LIB) X(LOCKSWAP_ONCPU_LOADER) X(LOCKSWAP_ROOT) X(LOCKSWAP_OVERSUB_STARTED_LOADER)

void say(const char* s) { diag(s, strlen(s)); }

// Every variable the library reads, with its choices or range: the list an
// error ends with, and the first half of LOCKSWAP_LIST=1.
void say_valid_settings() {
  say("lockswap: valid settings:\n");
#define NAME(id, name, type, desc) say(" " name);
#define FAMILY(Enum, field, env, LIST, dflt, what) \
  say("  " env " =");                               \
  LIST(NAME)                                        \
  say("   (" what "; default ");                      \
  say(variant_name(Enum::dflt));                      \
  say(")\n");
  LOCKSWAP_FAMILIES(FAMILY)
#undef FAMILY
#undef NAME
#define X(env, lo, hi, meaning, apply) say("  " #env " = " #lo ".." #hi ": " meaning "\n");
  LOCKSWAP_TUNABLES(X)
#undef X
  say("  LOCKSWAP_STATS = 0 1 counts profile: lock event counts at exit (1 = counts; near-zero cost),\n"
      "    profile: also per-lock, per-call-site wait and hold times (wraps every lock call)\n");
  say("  LOCKSWAP_STATS_FILE = path: write the statistics there instead of stderr (%p = pid; alone: counts)\n");
  say("  " ONCPU_FD_ENV " = descriptor of the owner-on-CPU map (set by lockswap-oncpu exec)\n");
  say("  LOCKSWAP_STATS_SIGNAL = USR1, USR2 or a real-time signal (SIGUSR2, RTMIN, RTMIN+3, RTMAX-1, 12, 40, ...):\n"
      "    also write the statistics when it arrives (default: none; signals the system or other programs raise\n"
      "    in normal operation, such as HUP, INT, TERM, PIPE, CHLD, ALRM, WINCH, CONT, are refused)\n");
  say("  LOCKSWAP_SELECT = RULE;RULE;...: a variant per lock, first matching rule wins (docs/select.md).\n"
      "    RULE = FAMILY=VARIANT@MATCHER, FAMILY = mutex rwlock sem lwlock, MATCHER = one of\n"
      "      sym:NAME             the lock lies inside the object symbol NAME (C or C++ name)\n"
      "      func:NAME            it is initialised (or, never initialised, first taken) in function NAME\n"
      "      site:MODULE+0xOFF    ... at that call site, as `lockswap report` prints it\n"
      "      range:MODULE+0xLO-0xHI  the lock lies at those link-time addresses of MODULE\n"
      "      tranche:NAME         (lwlock only) a PostgreSQL LWLock tranche, as pg_stat_activity names it\n"
      "    e.g. mutex=rwsem@sym:LOCK_table_cache;rwlock=percid@func:tc_acquire_table\n");
  say("  LOCKSWAP_LIST = 1 columns: print these settings and the matrix columns (1), or one\n"
      "    `NAME SETTINGS TAGS` line per column (columns; TAGS comma-separated, - for none), then stop before main with exit status 0\n");
}

// parse(value, MutexVariant{}) etc.: unset or empty means the default.
#define MATCH(id, name, type, desc) \
  if (strcmp(s, name) == 0) return E::id;
#define FAMILY(Enum, field, env, LIST, dflt, what)  \
  Enum parse(const char* s, Enum) {                 \
    using E = Enum;                                 \
    if (s == nullptr || *s == '\0') return E::dflt; \
    LIST(MATCH)                                     \
    config_error(env, s, "unknown " what);          \
  }
LOCKSWAP_FAMILIES(FAMILY)
#undef FAMILY
#undef MATCH

uint64_t parse_number(const char* var, const char* s, uint64_t lo, uint64_t hi) {
  uint64_t v = 0;
  if (*s == '\0') config_error(var, s, "empty value, expected a number");
  for (const char* p = s; *p; ++p) {
    if (*p < '0' || *p > '9') config_error(var, s, "not a decimal number");
    if (v > (UINT64_MAX - 9) / 10) config_error(var, s, "number too large");
    v = v * 10 + static_cast<uint64_t>(*p - '0');
  }
  if (v < lo || v > hi) config_error(var, s, "out of range");
  return v;
}

bool is_known_name(const char* entry, size_t len) {
  static const char* const known[] = {
      "LOCKSWAP_LIST",
      "LOCKSWAP_STATS",
      "LOCKSWAP_STATS_FILE",
      ONCPU_FD_ENV,
      "LOCKSWAP_STATS_SIGNAL",
      "LOCKSWAP_SELECT",
#define FAMILY(Enum, field, env, LIST, dflt, what) env,
      LOCKSWAP_FAMILIES(FAMILY)
#undef FAMILY
#define X(env, lo, hi, meaning, apply) #env,
      LOCKSWAP_TUNABLES(X)
#undef X
#define X(env) #env,
      LOCKSWAP_WRAPPER_VARIABLES(X)
#undef X
  };
  for (const char* k : known)
    if (strlen(k) == len && strncmp(k, entry, len) == 0) return true;
  return false;
}

// A misspelt variable would otherwise be ignored without a word. Not in
// secure-execution mode (setuid programs): there every LOCKSWAP_* setting is
// ignored (secure_getenv), and an unprivileged caller must not be able to
// stop a privileged program with a made-up name.
void reject_unknown_variables() {
  if (environ == nullptr || getauxval(AT_SECURE) != 0) return;
  for (char** e = environ; *e; ++e) {
    if (strncmp(*e, "LOCKSWAP_", 9) != 0) continue;
    const char* eq = strchr(*e, '=');
    size_t len = eq ? static_cast<size_t>(eq - *e) : strlen(*e);
    if (!is_known_name(*e, len)) config_error(*e, len, eq ? eq + 1 : "", "unknown lockswap variable");
  }
}

// A copy, not the pointer secure_getenv returns: programs that rewrite their
// environment block (PostgreSQL's process titles) would change the path.
char g_stats_path[4096];

void read_stats_file() {
  const char* s = secure_getenv("LOCKSWAP_STATS_FILE");
  if (s == nullptr || *s == '\0') return;
  size_t n = strlen(s);
  if (n >= sizeof g_stats_path) config_error("LOCKSWAP_STATS_FILE", "...", "path longer than 4095 bytes");
  memcpy(g_stats_path, s, n + 1);
  g_config.stats_file = g_stats_path;
}

// LOCKSWAP_STATS: 0, 1 (= counts; any decimal spelling of 0 or 1), counts or
// profile. Unset with a LOCKSWAP_STATS_FILE: counts — naming a file never
// switches the profiler on.
void read_stats_mode() {
  const char* s = secure_getenv("LOCKSWAP_STATS");
  StatsMode m = g_config.stats_file != nullptr ? StatsMode::counts : StatsMode::off;
  if (s != nullptr && strcmp(s, "counts") == 0) m = StatsMode::counts;
  else if (s != nullptr && strcmp(s, "profile") == 0) m = StatsMode::profile;
  else if (s != nullptr) m = parse_number("LOCKSWAP_STATS", s, 0, 1) != 0 ? StatsMode::counts : StatsMode::off;
  g_config.stats_mode = m;
  g_config.stats = m != StatsMode::off;
  g_config.profile = m == StatsMode::profile;
}

// LOCKSWAP_ONCPU_FD, checked whenever it is set: -1 when unset or empty.
int read_oncpu_fd() {
  const char* fd = secure_getenv(ONCPU_FD_ENV);
  if (fd == nullptr || *fd == '\0') return -1;
  return static_cast<int>(parse_number(ONCPU_FD_ENV, fd, 0, INT32_MAX));
}

// LOCKSWAP_STATS_SIGNAL: USR1, USR2 or a real-time signal, by name (with or
// without "SIG"; RTMIN, RTMIN+n, RTMAX-n, RTMAX) or number. Every other
// signal is raised by the system or by other programs in normal operation
// (a closed pipe, a child's exit, a resized terminal, job control, timers,
// profilers, Ctrl-C, shutdown): a dump there would come at the wrong times
// or replace what the signal is meant to do.
constexpr struct {
  const char* name;
  int number;
} kUserSignals[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}};

bool stats_signal_allowed(int n) {
  if (n >= SIGRTMIN && n <= SIGRTMAX) return true;  // glibc keeps the ones below SIGRTMIN
  return n == SIGUSR1 || n == SIGUSR2;
}

// "RTMIN", "RTMIN+n", "RTMAX", "RTMAX-n": the number, or 0 when `name` is
// none of these or out of range.
int realtime_signal(const char* name) {
  bool min = strncmp(name, "RTMIN", 5) == 0, max = strncmp(name, "RTMAX", 5) == 0;
  if (!min && !max) return 0;
  const char* p = name + 5;
  uint64_t offset = 0;
  if (*p != '\0') {
    if (*p != (min ? '+' : '-') || p[1] == '\0') return 0;
    for (++p; *p; ++p) {
      if (*p < '0' || *p > '9' || offset > 1024) return 0;
      offset = offset * 10 + static_cast<uint64_t>(*p - '0');
    }
  }
  if (offset > static_cast<uint64_t>(SIGRTMAX - SIGRTMIN)) return 0;
  return min ? SIGRTMIN + static_cast<int>(offset) : SIGRTMAX - static_cast<int>(offset);
}

// A classic signal's abbreviation ("PIPE"): its number, else 0.
int classic_signal(const char* name) {
  for (int n = 1; n < SIGRTMIN; ++n)
    if (const char* abbrev = sigabbrev_np(n); abbrev != nullptr && strcmp(abbrev, name) == 0) return n;
  return 0;
}

void read_stats_signal() {
  const char* s = secure_getenv("LOCKSWAP_STATS_SIGNAL");
  if (s == nullptr || *s == '\0') return;
  int n = 0;
  if (*s >= '0' && *s <= '9') {
    n = static_cast<int>(parse_number("LOCKSWAP_STATS_SIGNAL", s, 1, 1024));
  } else {
    const char* name = strncmp(s, "SIG", 3) == 0 ? s + 3 : s;
    n = realtime_signal(name);
    for (const auto& sig : kUserSignals)
      if (strcmp(name, sig.name) == 0) n = sig.number;
    if (n == 0 && classic_signal(name) == 0) config_error("LOCKSWAP_STATS_SIGNAL", s, "unknown signal name");
  }
  if (!stats_signal_allowed(n))
    config_error("LOCKSWAP_STATS_SIGNAL", s,
                 "refused: the system or other programs raise this signal in normal operation, or a program "
                 "may not catch it; use USR1, USR2 or a real-time signal");
  g_config.stats_signal = n;
}

// LOCKSWAP_LIST: what `lockswap --list` shows and what scripts read the matrix
// columns from (preload/config/variant_columns.def), so that no one parses an error
// message. The program itself does not start.
void list_and_exit_if_asked() {
  const char* s = secure_getenv("LOCKSWAP_LIST");
  if (s == nullptr) return;
  bool plain = strcmp(s, "columns") == 0;
  if (!plain && strcmp(s, "1") != 0) config_error("LOCKSWAP_LIST", s, "expected 1 or columns");
  if (!plain) {
    say_valid_settings();
    say("lockswap: columns of the test matrix (lockswap --variant NAME):\n");
  }
  for (const VariantColumn& c : kVariantColumns) {
    say(plain ? "" : "  ");
    say(c.name);
    say(" ");
    say(c.settings);
    if (plain) {
      say(" ");
      say(*c.tags != '\0' ? c.tags : "-");
    } else {
      say("\n      ");
      say(c.description);
      say(" [tags: ");
      say(*c.tags != '\0' ? c.tags : "-");
      say("]");
    }
    say("\n");
  }
  _exit(0);
}

// lockswap overlays its state on glibc's lock objects; on a glibc whose
// layouts it was not checked against (glibc_facts.h) that could corrupt
// locks without a word, so it stops instead, unless told to run anyway.
void refuse_unchecked_glibc() {
  const char* version = gnu_get_libc_version();
  if (glibc_facts::version_checked(version) || g_glibc_unchecked) return;
  say("lockswap: glibc ");
  diag_untrusted(version, strlen(version));
  say(" is not a version lockswap has been checked against (checked:");
  for (std::string_view v : glibc_facts::kCheckedVersions) {
    say(" ");
    diag(v.data(), v.size());
  }
  say("); its lock layouts may differ and locks could be corrupted silently.\n"
      "  Check this glibc with lockswap's glibc tier (docs/glibc-versions.md), or set\n"
      "  LOCKSWAP_GLIBC_UNCHECKED=1 to run anyway at your own risk.\n");
  _exit(2);
}

}  // namespace

Choices parse_settings() {
  reject_unknown_variables();
  list_and_exit_if_asked();
#define X(env, lo, hi, meaning, apply)                     \
  if (const char* s = secure_getenv(#env)) {               \
    uint64_t v = parse_number(#env, s, lo, hi);            \
    apply;                                                 \
  }
  LOCKSWAP_TUNABLES(X)
#undef X
  refuse_unchecked_glibc();
  self_check::refuse_if_glibc_differs();  // every glibc, checked or not: its behaviour, not its name
  read_stats_file();
  read_stats_mode();
  read_stats_signal();
  Choices c{};
  c.oncpu_fd = read_oncpu_fd();
  // Every family is parsed before any is published, so a bad LOCKSWAP_SEM
  // stops the program before a single lock has used another family's choice.
#define FAMILY(Enum, field, env, LIST, dflt, what) c.field = parse(secure_getenv(env), Enum{});
  LOCKSWAP_FAMILIES(FAMILY)
#undef FAMILY
  select::load();  // may exit like any bad setting; resolves names once, before the first lock uses a rule
  return c;
}

void publish(const Choices& c) {
#define FAMILY(Enum, field, env, LIST, dflt, what) \
  std::atomic_ref<Enum>(g_config.field).store(c.field, std::memory_order_release);
  LOCKSWAP_FAMILIES(FAMILY)
#undef FAMILY
}

// `var` is var_len bytes (an unknown name is not NUL-terminated where it ends).
void say_refused_setting(const char* var, size_t var_len, const char* value, const char* why) {
  say("lockswap: ");
  diag_untrusted(var, var_len);
  say("=");
  diag_untrusted(value, strlen(value));
  say(": ");
  say(why);
  say("\n");
  say_valid_settings();
}

#define NAME(id, name, type, desc) \
  case E::id:                      \
    return name;
#define FAMILY(Enum, field, env, LIST, dflt, what) \
  const char* variant_name(Enum v) {               \
    using E = Enum;                    \
    switch (v) {                       \
      LIST(NAME)                       \
      default:                         \
        return "unset";                \
    }                                  \
  }
LOCKSWAP_FAMILIES(FAMILY)
#undef FAMILY
#undef NAME

}  // namespace lockswap
