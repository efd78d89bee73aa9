// preload/config.cpp — environment parsing: variants and tunables.
//
// Runs before malloc may be usable (a lock taken inside the allocator's own
// initialisation), so it allocates nothing and writes with write(2).
// Every LOCKSWAP_* variable is checked: an unknown name, variant or a
// malformed number stops the program before main with the valid choices,
// never a silent fallback.
#include "preload/config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "core/lockref.h"
#include "core/oncpu.h"
#include "core/rwsem.h"

extern char** environ;

namespace lockswap {

Config g_config;

namespace {

// Tunables: X(ENV_NAME, min, max, "meaning", apply-statement using `v`)
#define LOCKSWAP_TUNABLES(X)                                                                        \
  X(LOCKSWAP_RWSEM_HANDOFF_US, 0, 10000000, "waiter age (us) after which rwsem hands off (kernel: 4000)", \
    g_rwsem_tunables.handoff_ns = v * 1000)                                                          \
  X(LOCKSWAP_RWSEM_OWNER_SPIN_US, 0, 1000000, "max us one rwsem spin spends on a writer (or no) owner; reader-owned spinning has the kernel's 10-25 us (default 5)",   \
    g_rwsem_tunables.owner_spin_ns = v * 1000)                                                       \
  X(LOCKSWAP_RWSEM_SPIN, 0, 1, "1: writer optimistic spinning (kernel default), 0: off",             \
    g_rwsem_tunables.writer_spin = v != 0)                                                           \
  X(LOCKSWAP_RWSEM_SPINNERS, 0, 4096, "threads of a process that may spin at once (0 = default: its CPUs - 1, at least 1)", \
    g_rwsem_tunables.max_spinners = static_cast<uint32_t>(v))                                        \
  X(LOCKSWAP_RWSEM_READER_PREF_US, 0, 10000000, "us a reader held off by a writer waits on a read-held default-kind rwlock before entering anyway (default 4000)", \
    g_rwsem_tunables.reader_pref_ns = v * 1000)                                                      \
  X(LOCKSWAP_RWSEM_DROP_BIAS, 0, 1, "1: 2016 option, failed fast-path readers drop their bias at once", \
    g_rwsem_tunables.drop_bias_early = v != 0)                                                       \
  X(LOCKSWAP_LOCKREF_RETRIES, 0, 1000000, "lock-free compare-and-swap attempts before a lockref takes its lock (0 = unbounded; kernel: 100)", \
    g_lockref_tunables.retries = static_cast<uint32_t>(v))                                          \
  X(LOCKSWAP_STATS, 0, 1, "1: print lock event counts and per-lock, per-site statistics at exit (stderr)",   \
    g_config.stats = v != 0)                                                                         \
  X(LOCKSWAP_STATS_BACKTRACE, 0, 1000000, "statistics: backtrace of a site's first contended acquisition, then 1 in N (0 = none; default 64)", \
    g_config.stats_backtrace = static_cast<uint32_t>(v))

// API families (and the concurrency-id allocator of the percid rwlock).
// Parsing, the list of valid choices and the names in statistics are
// generated from these.
// X(Enum, field, "ENV_NAME", VARIANT_LIST, default, "what a choice names")
#define LOCKSWAP_FAMILIES(X)                                                                \
  X(MutexVariant, mutex, "LOCKSWAP_MUTEX", LOCKSWAP_MUTEX_VARIANTS, glibc, "mutex variant")     \
  X(RwlockVariant, rwlock, "LOCKSWAP_RWLOCK", LOCKSWAP_RWLOCK_VARIANTS, glibc, "rwlock variant") \
  X(SemVariant, sem, "LOCKSWAP_SEM", LOCKSWAP_SEM_VARIANTS, glibc, "sem variant")               \
  X(CidMode, cid, "LOCKSWAP_CID", LOCKSWAP_CID_VARIANTS, rseq, "concurrency-id allocator") \
  X(OncpuMode, oncpu, "LOCKSWAP_ONCPU", LOCKSWAP_ONCPU_VARIANTS, automatic, "owner-on-CPU source for spinners")

// Read by the `lockswap` command, not by the library: accepted and ignored.
#define LOCKSWAP_WRAPPER_VARIABLES(X) X(LOCKSWAP_LIB)

void say(const char* s) { (void)!write(2, s, strlen(s)); }

// Text from the environment: at most kEchoMax bytes, control and non-ASCII
// bytes shown as '?', and the full length when cut, so a hostile multi-megabyte
// value cannot flood stderr or a terminal.
constexpr size_t kEchoMax = 128;
void say_untrusted(const char* s, size_t len) {
  char buf[kEchoMax];
  size_t n = len < kEchoMax ? len : kEchoMax;
  for (size_t i = 0; i < n; ++i) buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
  (void)!write(2, buf, n);
  if (n == len) return;
  char digits[24];
  size_t d = sizeof digits;
  for (size_t v = len; d == sizeof digits || v != 0; v /= 10) digits[--d] = static_cast<char>('0' + v % 10);
  say("... (");
  (void)!write(2, digits + d, sizeof digits - d);
  say(" bytes)");
}

// `var` is var_len bytes (an unknown name is not NUL-terminated where it ends).
[[noreturn]] void fail_with_choices(const char* var, size_t var_len, const char* value, const char* why) {
  say("lockswap: ");
  say_untrusted(var, var_len);
  say("=");
  say_untrusted(value, strlen(value));
  say(": ");
  say(why);
  say("\n");
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
  say("  LOCKSWAP_STATS_FILE = path: write the statistics there instead of stderr (%p = pid)\n");
  say("  " ONCPU_FD_ENV " = descriptor of the owner-on-CPU map (set by lockswap-oncpu exec)\n");
  say("  LOCKSWAP_STATS_SIGNAL = a signal name or number (USR1, SIGUSR2, 12, ...): also write the statistics when it\n"
      "    arrives (default: none; not KILL, STOP, the fault signals or glibc's internal ones)\n");
  _exit(2);
}

[[noreturn]] void fail_with_choices(const char* var, const char* value, const char* why) {
  fail_with_choices(var, strlen(var), value, why);
}

// parse(value, MutexVariant{}) etc.: unset or empty means the default.
#define MATCH(id, name, type, desc) \
  if (strcmp(s, name) == 0) return E::id;
#define FAMILY(Enum, field, env, LIST, dflt, what)  \
  Enum parse(const char* s, Enum) {                 \
    using E = Enum;                                 \
    if (s == nullptr || *s == '\0') return E::dflt; \
    LIST(MATCH)                                     \
    fail_with_choices(env, s, "unknown " what);     \
  }
LOCKSWAP_FAMILIES(FAMILY)
#undef FAMILY
#undef MATCH

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
  static const char* const known[] = {
      "LOCKSWAP_STATS_FILE",
      ONCPU_FD_ENV,
      "LOCKSWAP_STATS_SIGNAL",
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

// A misspelt variable would otherwise be ignored without a word.
void reject_unknown_variables() {
  if (environ == nullptr) return;
  for (char** e = environ; *e; ++e) {
    if (strncmp(*e, "LOCKSWAP_", 9) != 0) continue;
    const char* eq = strchr(*e, '=');
    size_t len = eq ? static_cast<size_t>(eq - *e) : strlen(*e);
    if (!is_known_name(*e, len)) fail_with_choices(*e, len, eq ? eq + 1 : "", "unknown lockswap variable");
  }
}

// A copy, not the pointer secure_getenv returns: programs that rewrite their
// environment block (PostgreSQL's process titles) would change the path.
char g_stats_path[4096];

void read_stats_file() {
  const char* s = secure_getenv("LOCKSWAP_STATS_FILE");
  if (s == nullptr || *s == '\0') return;
  size_t n = strlen(s);
  if (n >= sizeof g_stats_path) fail_with_choices("LOCKSWAP_STATS_FILE", "...", "path longer than 4095 bytes");
  memcpy(g_stats_path, s, n + 1);
  g_config.stats_file = g_stats_path;
  g_config.stats = true;
}

// LOCKSWAP_ONCPU: auto takes the map when it is usable, bpf insists on it.
void select_oncpu(OncpuMode mode) {
  if (mode == OncpuMode::off || mode == OncpuMode::rseq) {
    oncpu::g_source = mode == OncpuMode::off ? oncpu::Source::off : oncpu::Source::rseq;
    return;
  }
  const char* why = "LOCKSWAP_ONCPU_FD is not set: run under `lockswap-oncpu exec` or `lockswap --oncpu` (as root)";
  const char* fd = secure_getenv(ONCPU_FD_ENV);
  if (fd != nullptr && *fd != '\0') why = oncpu::attach(static_cast<int>(parse_number(ONCPU_FD_ENV, fd, 0, INT32_MAX)));
  if (why == nullptr) {
    oncpu::g_source = oncpu::Source::bpf;
  } else if (mode == OncpuMode::bpf) {
    fail_with_choices("LOCKSWAP_ONCPU", "bpf", why);
  } else {
    oncpu::g_source = oncpu::Source::rseq;
  }
}

// LOCKSWAP_STATS_SIGNAL: a name with or without "SIG", or a number, of a
// signal a program may catch and that glibc does not use itself.
struct SignalName {
  const char* name;
  int number;
};
constexpr SignalName kStatsSignals[] = {{"HUP", SIGHUP},   {"INT", SIGINT},       {"QUIT", SIGQUIT}, {"USR1", SIGUSR1},
                                        {"USR2", SIGUSR2}, {"PIPE", SIGPIPE},     {"ALRM", SIGALRM}, {"TERM", SIGTERM},
                                        {"CHLD", SIGCHLD}, {"CONT", SIGCONT},     {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN},
                                        {"TTOU", SIGTTOU}, {"URG", SIGURG},       {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ},
                                        {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"IO", SIGIO},
                                        {"PWR", SIGPWR},   {"SYS", SIGSYS}};

bool catchable_signal(int n) {
  if (n >= SIGRTMIN && n <= SIGRTMAX) return true;  // glibc keeps the ones below SIGRTMIN
  for (const SignalName& s : kStatsSignals)
    if (s.number == n) return true;
  return false;
}

void read_stats_signal() {
  const char* s = secure_getenv("LOCKSWAP_STATS_SIGNAL");
  if (s == nullptr || *s == '\0') return;
  if (*s >= '0' && *s <= '9') {
    auto n = static_cast<int>(parse_number("LOCKSWAP_STATS_SIGNAL", s, 1, 1024));
    if (!catchable_signal(n)) fail_with_choices("LOCKSWAP_STATS_SIGNAL", s, "not a signal a program may catch");
    g_config.stats_signal = n;
    return;
  }
  const char* name = strncmp(s, "SIG", 3) == 0 ? s + 3 : s;
  for (const SignalName& sig : kStatsSignals)
    if (strcmp(name, sig.name) == 0) {
      g_config.stats_signal = sig.number;
      return;
    }
  fail_with_choices("LOCKSWAP_STATS_SIGNAL", s, "unknown signal name");
}

std::atomic<int> g_loading{0};
std::atomic<bool> g_loaded{false};
}  // namespace

void load_config() {
  // First caller parses; concurrent first callers wait (parsing takes
  // microseconds and cannot block).
  int expected = 0;
  if (!g_loading.compare_exchange_strong(expected, 1)) {
    while (!g_loaded.load(std::memory_order_acquire)) sched_yield();
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
  read_stats_file();
  read_stats_signal();
  // Parse every family before publishing any, so a bad LOCKSWAP_SEM stops the
  // program before a single lock has used another family's choice.
#define FAMILY(Enum, field, env, LIST, dflt, what) Enum field##_choice = parse(secure_getenv(env), Enum{});
  LOCKSWAP_FAMILIES(FAMILY)
#undef FAMILY
  cid::select(cid_choice);  // before the first fork: `global` maps its shared page here
  select_oncpu(oncpu_choice);  // before the first spinner reads oncpu::g_source
#define FAMILY(Enum, field, env, LIST, dflt, what) \
  std::atomic_ref<Enum>(g_config.field).store(field##_choice, std::memory_order_release);
  LOCKSWAP_FAMILIES(FAMILY)
#undef FAMILY
  g_loaded.store(true, std::memory_order_release);
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
