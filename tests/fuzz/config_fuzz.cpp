// tests/fuzz/config_fuzz.cpp — libFuzzer target for preload/config/config.cpp, the
// LOCKSWAP_* environment parser, with a differential oracle.
//
// Input: an environment block, entries separated by '\n' or NUL. The harness
// points `environ` at it, calls load_config(), and checks the outcome against
// a reference reading of the rules (README "Variants and environment"):
//   * every LOCKSWAP_* name (up to '=') is known;
//   * the first NAME= entry of a tunable is a non-empty decimal in [lo, hi]
//     (leading zeros allowed);
//   * the first LOCKSWAP_STATS_FILE= value is shorter than 4096 bytes;
//   * the first LOCKSWAP_STATS= value is counts, profile or a decimal 0..1;
//     unset, a non-empty LOCKSWAP_STATS_FILE means counts;
//   * the first LOCKSWAP_STATS_SIGNAL= value is empty, USR1, USR2, RTMIN,
//     RTMIN+n, RTMAX-n, RTMAX (with or without SIG) or the decimal number of
//     USR1, USR2 or a real-time signal; every other signal is refused;
//   * LOCKSWAP_ONCPU_FD, when non-empty, is a decimal 0..INT32_MAX under
//     every LOCKSWAP_ONCPU; bpf (which no descriptor of the fuzzer can
//     satisfy) is refused unless LOCKSWAP_ONCPU_STRICT=0, which accepts it
//     with one line;
//   * the first NAME= entry of a family (MUTEX, RWLOCK, SEM) is empty or a
//     variant name;
//   * once every name is known, a LOCKSWAP_LIST= entry stops the parse: the
//     first one is 1 or columns (the lists are printed and the program stops
//     with status 0) or the environment is rejected.
// Accepted: load_config() returns, with the variants and statistics settings
// the reference expects. Rejected: it exits with status 2 after a message
// that starts with "lockswap: ", names the variable and lists the valid
// settings. Any disagreement, crash, or ASan/UBSan report is a finding.
//
// The seam, without touching config.cpp: config.cpp (and boot.cpp, whose
// load_config() calls it) is included into this
// translation unit after every header it includes, with `_exit` and `write`
// renamed by macros, so that its exit returns here (longjmp) and its message
// is captured; its file-local state (anonymous namespace) is then reachable
// and reset before each input. Nothing else of the library is linked in but
// lockswap_core (for the tunables' definitions).
#include <sched.h>
#include <signal.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <utility>
#include <ctime>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

// preload/config.{h,cpp} apply __atomic_load_n/__atomic_store_n to scoped
// enums, a GCC extension clang rejects. Until they go through the enum's
// underlying type, route the two builtins through a wrapper that does so
// (defined before the macros, so it uses the real builtins).
template <class T>
inline T fuzz_atomic_load_n(const T* p, int mo) {
  if constexpr (std::is_enum_v<T>)
    return static_cast<T>(__atomic_load_n(reinterpret_cast<const std::underlying_type_t<T>*>(p), mo));
  else
    return __atomic_load_n(p, mo);
}
template <class T, class V>
inline void fuzz_atomic_store_n(T* p, V v, int mo) {
  if constexpr (std::is_enum_v<T>)
    __atomic_store_n(reinterpret_cast<std::underlying_type_t<T>*>(p), static_cast<std::underlying_type_t<T>>(v), mo);
  else
    __atomic_store_n(p, v, mo);
}
#define __atomic_load_n(p, mo) fuzz_atomic_load_n(p, mo)
#define __atomic_store_n(p, v, mo) fuzz_atomic_store_n(p, v, mo)

#include "core/cid.h"
#include "core/lockref.h"
#include "core/nocancel_io.h"
#include "core/oncpu.h"
#include "core/rwsem.h"
#include "preload/config/config.h"
#include "preload/lwlock/lwlock.h"

namespace fuzz {
jmp_buf g_exit_jmp;
int g_exit_code = -1;
std::string g_msg;
}  // namespace fuzz

extern "C" [[noreturn]] void lockswap_fuzz_exit(int code) {
  fuzz::g_exit_code = code;
  longjmp(fuzz::g_exit_jmp, 1);
}
// Every write config.cpp makes is a message (to its private stderr).
extern "C" ssize_t lockswap_fuzz_write(int, const void* buf, size_t n) {
  fuzz::g_msg.append(static_cast<const char*>(buf), n);
  return static_cast<ssize_t>(n);
}
// config.cpp writes with nocancel::write, which the macro below renames too.
namespace lockswap::nocancel {
inline ssize_t lockswap_fuzz_write(int fd, const void* buf, size_t n) { return ::lockswap_fuzz_write(fd, buf, n); }
}  // namespace lockswap::nocancel

// LOCKSWAP_SELECT is parsed by preload/config/select.cpp, which resolves symbols of
// the loaded objects and is not linked here: its rules and their errors are
// tested by tests/select. load_config() calls it through this stand-in.
namespace lockswap::select {
void load() {}
}  // namespace lockswap::select
// LOCKSWAP_LWLOCK's redirection (preload/lwlock/) looks for a PostgreSQL in
// the process, not at the environment: tested by tests/lwlock and
// tests/pg_lwlock. load_config() hands it the parsed choice.
namespace lockswap::lwlock {
void start(LwlockVariant) {}
}  // namespace lockswap::lwlock
// The start-up self-check (preload/self_check.cpp) looks at glibc, not at the
// environment: tested by tests/glibc_tier. Not linked here either.
namespace lockswap::self_check {
void refuse_if_glibc_differs() {}
}  // namespace lockswap::self_check

#define _exit(code) lockswap_fuzz_exit(code)
#define write(fd, buf, n) lockswap_fuzz_write(fd, buf, n)
#include "preload/config/config.cpp"
#include "preload/boot.cpp"  // load_config(): the parse, then what it starts
#include "preload/diag.cpp"  // the private stderr config.cpp's messages go to
#undef write
#undef _exit
#undef __atomic_load_n
#undef __atomic_store_n

namespace {

using lockswap::g_config;

struct Tunable {
  const char* name;
  uint64_t lo, hi;
};
const Tunable kTunables[] = {
#define X(env, lo, hi, meaning, apply) {#env, lo, hi},
    LOCKSWAP_TUNABLES(X)
#undef X
};

// The names of one variant list, in its order (index 0: the default).
#define VARIANT_NAME(id, name, type, desc) name,
const char* const kMutexNames[] = {LOCKSWAP_MUTEX_VARIANTS(VARIANT_NAME)};
const char* const kRwlockNames[] = {LOCKSWAP_RWLOCK_VARIANTS(VARIANT_NAME)};
const char* const kSemNames[] = {LOCKSWAP_SEM_VARIANTS(VARIANT_NAME)};
const char* const kCidNames[] = {LOCKSWAP_CID_VARIANTS(VARIANT_NAME)};
const char* const kLwlockNames[] = {LOCKSWAP_LWLOCK_VARIANTS(VARIANT_NAME)};  // off first: the default
const char* const kWtlockNames[] = {LOCKSWAP_WTLOCK_VARIANTS(VARIANT_NAME)};  // off first: the default
const char* const kOncpuNames[] = {LOCKSWAP_ONCPU_VARIANTS(VARIANT_NAME)};  // auto first: unset means auto
#undef VARIANT_NAME


// The first "name=" entry's value, as getenv() finds it.
const std::string* first_value(const std::vector<std::string>& env, std::string_view name, std::string* out) {
  for (const std::string& e : env)
    if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '=') {
      *out = e.substr(name.size() + 1);
      return out;
    }
  return nullptr;
}

bool number_ok(const std::string& v, uint64_t lo, uint64_t hi) {
  if (v.empty()) return false;
  for (char c : v)
    if (c < '0' || c > '9') return false;
  size_t i = v.find_first_not_of('0');
  std::string digits = i == std::string::npos ? "0" : v.substr(i);
  if (digits.size() > 19) return false;  // > 10^19: beyond every range
  uint64_t n = std::stoull(digits);
  return n >= lo && n <= hi;
}

// Index+1 of the variant named `v` ("" = the list's first, its default:
// glibc, or off for the server families), or 0 if unknown.
template <size_t N>
int variant_index(const char* const (&names)[N], const std::string* v) {
  if (v == nullptr || v->empty()) return 1;  // unset or empty: glibc, the first
  for (size_t i = 0; i < N; ++i)
    if (*v == names[i]) return static_cast<int>(i) + 1;
  return 0;
}

// LOCKSWAP_ONCPU: LOCKSWAP_ONCPU_FD is a number whenever it is set; bpf
// needs the map, which no descriptor of the fuzzer can be: refused, or with
// LOCKSWAP_ONCPU_STRICT=0 accepted with one line (`*degraded`).
bool oncpu_ok(const std::vector<std::string>& env, bool* degraded) {
  std::string v, fd, strict;
  *degraded = false;
  int mode = variant_index(kOncpuNames, first_value(env, "LOCKSWAP_ONCPU", &v));
  if (mode == 0) return false;
  if (first_value(env, ONCPU_FD_ENV, &fd) && !fd.empty() && !number_ok(fd, 0, INT32_MAX)) return false;
  if (strcmp(kOncpuNames[mode - 1], "bpf") != 0) return true;
  bool lenient = first_value(env, "LOCKSWAP_ONCPU_STRICT", &strict) && number_ok(strict, 0, 0);
  *degraded = lenient;
  return lenient;
}

bool known_name(std::string_view name) {
  if (name == "LOCKSWAP_LIST" || name == "LOCKSWAP_STATS" || name == "LOCKSWAP_STATS_FILE" || name == "LOCKSWAP_STATS_SIGNAL" ||
      name == "LOCKSWAP_MUTEX" || name == "LOCKSWAP_RWLOCK" || name == "LOCKSWAP_SEM" || name == "LOCKSWAP_CID" ||
      name == "LOCKSWAP_LWLOCK" || name == "LOCKSWAP_WTLOCK" ||
      name == "LOCKSWAP_LIB" || name == "LOCKSWAP_ONCPU" || name == ONCPU_FD_ENV || name == "LOCKSWAP_ONCPU_LOADER" ||
      name == "LOCKSWAP_ROOT" || name == "LOCKSWAP_OVERSUB_STARTED_LOADER" ||
      name == "LOCKSWAP_SELECT")  // its value is select.cpp's (the stand-in above accepts any)
    return true;
  for (const Tunable& t : kTunables)
    if (name == t.name) return true;
  return false;
}

// LOCKSWAP_STATS_SIGNAL's reference reading: the signal number, 0 for
// "none", -1 for a value the rules refuse.
int expected_stats_signal(const std::string* v) {
  auto allowed = [](int n) { return n == SIGUSR1 || n == SIGUSR2 || (n >= SIGRTMIN && n <= SIGRTMAX); };
  if (v == nullptr || v->empty()) return 0;
  if ((*v)[0] >= '0' && (*v)[0] <= '9') {
    if (!number_ok(*v, 1, 1024)) return -1;
    int n = static_cast<int>(std::stoull(v->substr(std::min(v->find_first_not_of('0'), v->size() - 1))));
    return allowed(n) ? n : -1;
  }
  std::string name = v->compare(0, 3, "SIG") == 0 ? v->substr(3) : *v;
  if (name == "USR1") return SIGUSR1;
  if (name == "USR2") return SIGUSR2;
  if (name == "RTMIN") return SIGRTMIN;
  if (name == "RTMAX") return SIGRTMAX;
  bool min = name.compare(0, 6, "RTMIN+") == 0, max = name.compare(0, 6, "RTMAX-") == 0;
  if (!min && !max) return -1;
  std::string digits = name.substr(6);
  if (!number_ok(digits, 0, static_cast<uint64_t>(SIGRTMAX - SIGRTMIN))) return -1;
  int offset = static_cast<int>(std::stoull(digits.substr(std::min(digits.find_first_not_of('0'), digits.size() - 1))));
  return min ? SIGRTMIN + offset : SIGRTMAX - offset;
}

[[noreturn]] void finding(const char* what, const std::vector<std::string>& env) {
  fprintf(stderr, "config_fuzz: %s\nconfig_fuzz: environment (%zu entries):\n", what, env.size());
  for (const std::string& e : env) fprintf(stderr, "  [%s]\n", e.c_str());
  fprintf(stderr, "config_fuzz: library said: [%s] exit=%d\n", fuzz::g_msg.c_str(), fuzz::g_exit_code);
  abort();
}

void reset_parser_state() {
  g_config = lockswap::Config{};
  lockswap::g_rwsem_tunables = lockswap::RwsemTunables{};
  lockswap::g_lockref_tunables = lockswap::LockrefTunables{};
  lockswap::g_loading.store(0);
  lockswap::g_loaded.store(false);
  lockswap::g_stats_path[0] = '\0';
  lockswap::oncpu::g_source = lockswap::oncpu::Source::off;
  lockswap::drop_diag_fd();  // taken again by load_config()
  fuzz::g_msg.clear();
  fuzz::g_exit_code = -1;
}

}  // namespace

// load_config() with its exits caught: true if it returned. On its own so
// that no local of the caller lives across the setjmp (-Wclobbered).
__attribute__((noinline)) bool load_config_returns() {
  if (setjmp(fuzz::g_exit_jmp) != 0) return false;
  lockswap::load_config();
  return true;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Split into entries; at most 64, as a real environment block would be short.
  std::vector<std::string> env;
  std::string cur;
  for (size_t i = 0; i < size && env.size() < 64; ++i) {
    char c = static_cast<char>(data[i]);
    if (c == '\n' || c == '\0') {
      env.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty() && env.size() < 64) env.push_back(cur);

  // Reference verdict.
  bool expect_ok = true;
  for (const std::string& e : env) {
    if (e.compare(0, 9, "LOCKSWAP_") != 0) continue;
    size_t eq = e.find('=');
    if (!known_name(std::string_view(e).substr(0, eq == std::string::npos ? e.size() : eq))) expect_ok = false;
  }
  std::string list_value;
  bool list_asked = expect_ok && first_value(env, "LOCKSWAP_LIST", &list_value);
  bool expect_list = list_asked && (list_value == "1" || list_value == "columns");
  if (list_asked && !expect_list) expect_ok = false;
  std::string tmp;
  for (const Tunable& t : kTunables)
    if (first_value(env, t.name, &tmp) && !number_ok(tmp, t.lo, t.hi)) expect_ok = false;
  std::string stats_file;
  bool have_stats_file = first_value(env, "LOCKSWAP_STATS_FILE", &stats_file) && !stats_file.empty();
  if (have_stats_file && stats_file.size() >= 4096) expect_ok = false;
  std::string vm, vr, vs;
  int im = variant_index(kMutexNames, first_value(env, "LOCKSWAP_MUTEX", &vm));
  int ir = variant_index(kRwlockNames, first_value(env, "LOCKSWAP_RWLOCK", &vr));
  int is = variant_index(kSemNames, first_value(env, "LOCKSWAP_SEM", &vs));
  std::string vc, vl, vw;
  if (im == 0 || ir == 0 || is == 0 || variant_index(kCidNames, first_value(env, "LOCKSWAP_CID", &vc)) == 0)
    expect_ok = false;
  if (variant_index(kLwlockNames, first_value(env, "LOCKSWAP_LWLOCK", &vl)) == 0 ||
      variant_index(kWtlockNames, first_value(env, "LOCKSWAP_WTLOCK", &vw)) == 0)
    expect_ok = false;
  bool oncpu_degraded = false;
  if (!oncpu_ok(env, &oncpu_degraded)) expect_ok = false;
  std::string signal_value;
  int stats_signal = expected_stats_signal(first_value(env, "LOCKSWAP_STATS_SIGNAL", &signal_value));
  if (stats_signal < 0) expect_ok = false;
  std::string stats;
  lockswap::StatsMode stats_mode = have_stats_file ? lockswap::StatsMode::counts : lockswap::StatsMode::off;
  if (first_value(env, "LOCKSWAP_STATS", &stats)) {
    if (stats == "counts") stats_mode = lockswap::StatsMode::counts;
    else if (stats == "profile") stats_mode = lockswap::StatsMode::profile;
    else if (number_ok(stats, 0, 1)) stats_mode = number_ok(stats, 1, 1) ? lockswap::StatsMode::counts : lockswap::StatsMode::off;
    else expect_ok = false;
  }

  // The environment block, as the C library sees it.
  std::vector<char*> block;
  for (std::string& e : env) block.push_back(e.data());
  block.push_back(nullptr);

  reset_parser_state();
  char** saved = environ;
  environ = block.data();
  bool returned = load_config_returns();
  environ = saved;

  if (expect_list || (!returned && fuzz::g_exit_code == 0)) {
    if (!expect_list) finding("listed and stopped without LOCKSWAP_LIST=1 or columns", env);
    else if (returned || fuzz::g_exit_code != 0) finding("LOCKSWAP_LIST did not list and stop with status 0", env);
    else if (fuzz::g_msg.empty() || fuzz::g_msg.back() != '\n') finding("LOCKSWAP_LIST printed no whole lines", env);
    return 0;
  }
  if (returned) {
    if (!expect_ok) finding("accepted an environment the rules reject", env);
    if (oncpu_degraded ? fuzz::g_msg.rfind("lockswap: LOCKSWAP_ONCPU=bpf (LOCKSWAP_ONCPU_STRICT=0): ", 0) != 0 ||
                             std::count(fuzz::g_msg.begin(), fuzz::g_msg.end(), '\n') != 1
                       : !fuzz::g_msg.empty())
      finding(oncpu_degraded ? "bpf degraded without exactly its one line" : "accepted, but printed a message", env);
    if (oncpu_degraded && lockswap::oncpu::g_source != lockswap::oncpu::Source::rseq)
      finding("bpf degraded to something other than rseq", env);
    if (static_cast<int>(g_config.mutex) != im || static_cast<int>(g_config.rwlock) != ir ||
        static_cast<int>(g_config.sem) != is)
      finding("accepted, but chose other variants than the ones named", env);
    if (g_config.stats_mode != stats_mode || g_config.stats != (stats_mode != lockswap::StatsMode::off) ||
        g_config.profile != (stats_mode == lockswap::StatsMode::profile))
      finding("LOCKSWAP_STATS / LOCKSWAP_STATS_FILE not applied", env);
    if (g_config.stats_signal != stats_signal) finding("LOCKSWAP_STATS_SIGNAL not applied", env);
    if (have_stats_file != (g_config.stats_file != nullptr) ||
        (have_stats_file && stats_file != g_config.stats_file))
      finding("LOCKSWAP_STATS_FILE not copied exactly", env);
  } else {
    if (expect_ok) finding("rejected an environment the rules accept", env);
    if (fuzz::g_exit_code != 2) finding("rejected with an exit status other than 2", env);
    if (fuzz::g_msg.compare(0, 10, "lockswap: ") != 0 ||
        fuzz::g_msg.find("lockswap: valid settings:\n") == std::string::npos || fuzz::g_msg.back() != '\n')
      finding("rejected without the message and the list of valid settings", env);
  }
  return 0;
}
