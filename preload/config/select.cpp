// preload/config/select.cpp — LOCKSWAP_SELECT: parsing the rules and resolving them
// to addresses once, when the configuration is read.
//
// Runs where load_config runs (perhaps inside another library's constructor,
// before malloc may be used): it allocates nothing. Rules and their resolved
// address ranges live in fixed static tables; the ELF files of the loaded
// objects are mapped read-only, scanned for the names the rules ask for, and
// unmapped (the vDSO, which has no file, is read in memory). Their bytes are
// not trusted: the reader (preload/config/elf.h) checks every offset it follows.
// decide() reads those tables only.
#include "preload/config/select.h"

#include <elf.h>
#include <link.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

#include "core/nocancel_io.h"
#include "core/thread_registry.h"
#include "preload/diag.h"
#include "preload/config/elf.h"
#include "preload/config/escape.h"
#include "preload/config/registry.h"

namespace lockswap::select {

__thread uintptr_t t_site_hint __attribute__((tls_model("initial-exec")));

namespace {

constexpr const char* kVar = "LOCKSWAP_SELECT";
// One name may be defined many times: local symbols, copies, every `TestBody`
// or `operator()` of a program (func: rules).
constexpr int kMaxRanges = 128;
constexpr size_t kMaxText = 256;

enum class Matcher : uint8_t { sym, site, func, range, tranche };

struct Range {
  uintptr_t lo, hi;  // [lo, hi) at run time
};

struct Rule {
  char text[kMaxText + 32];  // the rule as written (for the statistics)
  Family family;
  uint8_t variant;  // the family's enum value
  Matcher matcher;
  char name[kMaxText];    // sym/func: the symbol; site/range: the module
  uint64_t offset_lo;     // site: the file offset; range: [lo, hi) link-time address
  uint64_t offset_hi;
  Range ranges[kMaxRanges];
  int nranges;
  bool ranges_dropped;    // more definitions than kMaxRanges: said at start-up
};

Rule g_rules[kMaxRules];
int g_nrules;
bool g_active[4];

[[noreturn]] void fail(const char* value, const char* why) { config_error(kVar, value, why); }

// ------------------------------------------------------------------ parsing

uint8_t parse_variant(Family f, const char* s, size_t n, const char* whole) {
  auto is = [&](const char* name) { return strlen(name) == n && strncmp(name, s, n) == 0; };
#define MATCH(id, name, type, desc) \
  if (is(name)) return static_cast<uint8_t>(E::id);
  switch (f) {
    case Family::mutex: {
      using E = MutexVariant;
      LOCKSWAP_MUTEX_VARIANTS(MATCH)
      break;
    }
    case Family::rwlock: {
      using E = RwlockVariant;
      LOCKSWAP_RWLOCK_VARIANTS(MATCH)
      break;
    }
    case Family::sem: {
      using E = SemVariant;
      LOCKSWAP_SEM_VARIANTS(MATCH)
      break;
    }
    case Family::lwlock: {
      using E = LwlockVariant;
      LOCKSWAP_LWLOCK_VARIANTS(MATCH)
      break;
    }
  }
#undef MATCH
  fail(whole, "unknown variant for that family (see LOCKSWAP_MUTEX / LOCKSWAP_RWLOCK / LOCKSWAP_SEM / LOCKSWAP_LWLOCK below)");
}

bool parse_hex(const char* s, size_t n, uint64_t& v) {
  if (n < 3 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') || n > 18) return false;
  v = 0;
  for (size_t i = 2; i < n; ++i) {
    char c = s[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return true;
}

void copy_text(char (&dst)[kMaxText], const char* s, size_t n, const char* whole) {
  if (n == 0) fail(whole, "empty name after the matcher");
  if (n >= kMaxText) fail(whole, "name longer than 255 bytes");
  memcpy(dst, s, n);
  dst[n] = '\0';
}

// MODULE+0xOFF (site) or MODULE+0xLO-0xHI (range); the module is split at
// the last '+', so module names may hold '+'.
void parse_module_offset(Rule& r, const char* s, size_t n, const char* whole) {
  const char* plus = nullptr;
  for (const char* p = s; p < s + n; ++p)
    if (*p == '+') plus = p;
  if (plus == nullptr) fail(whole, "expected MODULE+0xOFFSET");
  copy_text(r.name, s, static_cast<size_t>(plus - s), whole);
  const char* num = plus + 1;
  size_t len = static_cast<size_t>(s + n - num);
  if (r.matcher == Matcher::site) {
    if (!parse_hex(num, len, r.offset_lo)) fail(whole, "expected MODULE+0xOFFSET (hexadecimal, as `lockswap report` prints it)");
    return;
  }
  const char* dash = static_cast<const char*>(memchr(num, '-', len));
  if (dash == nullptr || !parse_hex(num, static_cast<size_t>(dash - num), r.offset_lo) ||
      !parse_hex(dash + 1, static_cast<size_t>(num + len - dash - 1), r.offset_hi) || r.offset_hi <= r.offset_lo)
    fail(whole, "expected MODULE+0xLOW-0xHIGH with LOW < HIGH");
}

// One rule: FAMILY=VARIANT@KIND:WHAT.
void parse_rule(const char* s, size_t n, const char* whole) {
  if (g_nrules == kMaxRules) fail(whole, "more than 16 rules");
  Rule& r = g_rules[g_nrules];
  size_t shown = n < sizeof r.text ? n : sizeof r.text - 1;  // the statistics show it, cut if need be
  memcpy(r.text, s, shown);
  r.text[shown] = '\0';
  const char* eq = static_cast<const char*>(memchr(s, '=', n));
  const char* at = static_cast<const char*>(memchr(s, '@', n));
  if (eq == nullptr || at == nullptr || at < eq) fail(whole, "expected FAMILY=VARIANT@MATCHER");
  size_t flen = static_cast<size_t>(eq - s);
  if (flen == 5 && strncmp(s, "mutex", 5) == 0) r.family = Family::mutex;
  else if (flen == 6 && strncmp(s, "rwlock", 6) == 0) r.family = Family::rwlock;
  else if (flen == 3 && strncmp(s, "sem", 3) == 0) r.family = Family::sem;
  else if (flen == 6 && strncmp(s, "lwlock", 6) == 0) r.family = Family::lwlock;
  else fail(whole, "unknown family (mutex, rwlock, sem or lwlock)");
  r.variant = parse_variant(r.family, eq + 1, static_cast<size_t>(at - eq - 1), whole);
  const char* m = at + 1;
  size_t mlen = static_cast<size_t>(s + n - m);
  const char* colon = static_cast<const char*>(memchr(m, ':', mlen));
  if (colon == nullptr) fail(whole, "expected a matcher: sym:NAME, site:MODULE+0xOFF, func:NAME or range:MODULE+0xLO-0xHI");
  size_t klen = static_cast<size_t>(colon - m);
  const char* what = colon + 1;
  size_t wlen = static_cast<size_t>(s + n - what);
  auto kind_is = [&](const char* k) { return strlen(k) == klen && strncmp(k, m, klen) == 0; };
  if (kind_is("sym")) r.matcher = Matcher::sym;
  else if (kind_is("func")) r.matcher = Matcher::func;
  else if (kind_is("site")) r.matcher = Matcher::site;
  else if (kind_is("range")) r.matcher = Matcher::range;
  else if (kind_is("tranche")) r.matcher = Matcher::tranche;
  else fail(whole, "unknown matcher (sym:NAME, site:MODULE+0xOFF, func:NAME, range:MODULE+0xLO-0xHI, tranche:NAME)");
  if ((r.family == Family::lwlock) != (r.matcher == Matcher::tranche))
    fail(whole, "lwlock rules take the tranche:NAME matcher, and only they do");
  if (r.matcher == Matcher::tranche) {
    copy_text(r.name, what, wlen, whole);  // checked against the server's tranche names (preload/lwlock/)
  } else if (r.matcher == Matcher::sym || r.matcher == Matcher::func) {
    // `lockswap report` prints C++ functions with their parameters: the name alone is matched.
    const char* paren = static_cast<const char*>(memchr(what, '(', wlen));
    copy_text(r.name, what, paren ? static_cast<size_t>(paren - what) : wlen, whole);
  } else {
    parse_module_offset(r, what, wlen, whole);
  }
  g_active[static_cast<int>(r.family)] = true;
  ++g_nrules;
}

}  // namespace


namespace {

// ------------------------------------------------------------- resolution

// _ZN [qualifiers] [St] <len><name>... E read component by component: true
// when the last one is `want`. Covers components whose names end in a digit,
// which the search below must skip: an anonymous namespace, _GLOBAL__N_1.
bool plain_nested_name_ends_with(const char* sym, const char* want, size_t wl) {
  const char* p = sym + 3;
  while (*p == 'r' || *p == 'V' || *p == 'K' || *p == 'R' || *p == 'O') ++p;
  if (p[0] == 'S' && p[1] == 't') p += 2;
  while (*p >= '1' && *p <= '9') {
    size_t len = 0;
    for (; *p >= '0' && *p <= '9' && len < kMaxText * 16; ++p) len = len * 10 + static_cast<size_t>(*p - '0');
    if (strnlen(p, len) < len) return false;
    if (p[len] == 'E') return len == wl && memcmp(p, want, wl) == 0;
    p += len;
  }
  return false;
}

// `want` ("name" or "ns::Class::name") against a symbol: the same name, a
// compiler's clone of it (name.cold, name.constprop.0), a member or
// namespaced function of that name, or its Itanium C++ mangling (_Z4name..., _ZL4name for a static one, _ZN2ns5Class4nameE...).
// A plain name also matches the last component of a nested one
// (`_ZN...<len>nameE`): debuggers and `lockswap report` often print a member
// function by its own name alone.
bool last_component_is(const char* sym, const char* want, size_t wl) {
  if (strncmp(sym, "_ZN", 3) != 0 || wl == 0 || wl > kMaxText) return false;
  char pattern[kMaxText + 8];
  int n = 0;
  char digits[4];
  for (size_t v = wl; v != 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  int len = 0;
  while (n > 0) pattern[len++] = digits[--n];
  memcpy(pattern + len, want, wl);
  pattern[len + static_cast<int>(wl)] = 'E';
  pattern[len + static_cast<int>(wl) + 1] = '\0';
  for (const char* at = strstr(sym + 3, pattern); at != nullptr; at = strstr(at + 1, pattern))
    if (!(at[-1] >= '0' && at[-1] <= '9')) return true;
  return plain_nested_name_ends_with(sym, want, wl);
}

bool symbol_matches(const char* sym, const char* want) {
  size_t wl = strlen(want);
  if (strncmp(sym, want, wl) == 0 && (sym[wl] == '\0' || sym[wl] == '.')) return true;
  if (sym[0] != '_' || sym[1] != 'Z') return false;
  if (strstr(want, "::") == nullptr && last_component_is(sym, want, wl)) return true;
  const char* p = sym + 2;
  if (*p == 'L') ++p;  // internal linkage (a static variable or function)
  bool nested = strstr(want, "::") != nullptr;
  if (nested) {
    if (*p++ != 'N') return false;
    while (*p == 'K' || *p == 'V' || *p == 'r') ++p;  // cv-qualifiers of a member function
  }
  const char* w = want;
  for (;;) {
    const char* end = strstr(w, "::");
    size_t len = end ? static_cast<size_t>(end - w) : strlen(w);
    char* after = nullptr;
    unsigned long n = strtoul(p, &after, 10);  // no allocation, no locale lookups for digits
    if (after == p || n != len || strncmp(after, w, len) != 0) return false;
    p = after + len;
    if (end == nullptr) break;
    w = end + 2;
  }
  if (nested) return *p == 'E' || *p == 'I';
  return !(*p >= '0' && *p <= '9');  // the end (a variable), parameters or a clone suffix
}

const char* basename_of(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

char g_exe_path[4096];

// The file behind a loaded object, as the report's `map` records name it.
const char* object_path(const dl_phdr_info* info) {
  if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') return info->dlpi_name;
  if (g_exe_path[0] == '\0') {
    ssize_t n = readlink("/proc/self/exe", g_exe_path, sizeof g_exe_path - 1);
    g_exe_path[n > 0 ? n : 0] = '\0';
  }
  return g_exe_path;
}

bool module_matches(const dl_phdr_info* info, const char* module) {
  const char* path = object_path(info);
  return strcmp(path, module) == 0 || strcmp(basename_of(path), module) == 0;
}

void add_range(Rule& r, uintptr_t lo, uintptr_t hi) {
  for (int i = 0; i < r.nranges; ++i)
    if (r.ranges[i].lo == lo && r.ranges[i].hi == hi) return;
  if (r.nranges < kMaxRanges) r.ranges[r.nranges++] = {lo, hi};
  else r.ranges_dropped = true;
}

// site: the file offset of a return address, mapped through the PT_LOAD
// segment that holds it (as the report computed it from /proc/self/maps).
void resolve_site(Rule& r, const dl_phdr_info* info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || r.offset_lo < ph.p_offset || r.offset_lo - ph.p_offset >= ph.p_filesz) continue;
    uintptr_t ip = info->dlpi_addr + ph.p_vaddr + (r.offset_lo - ph.p_offset);
    add_range(r, ip, ip + 1);
  }
}

bool wants_symbols(Matcher m) { return m == Matcher::sym || m == Matcher::func; }

bool symbol_kind_fits(Matcher m, unsigned type) {
  if (m == Matcher::func) return type == STT_FUNC || type == STT_GNU_IFUNC;
  return type == STT_OBJECT || type == STT_COMMON;
}

// One symbol of a loaded object (load_bias: its dlpi_addr) against every
// sym/func rule.
void match_symbol(const elf::Symbol& s, void* load_bias) {
  uintptr_t lo, hi;
  if (__builtin_add_overflow(*static_cast<uintptr_t*>(load_bias), s.value, &lo) ||
      __builtin_add_overflow(lo, s.size, &hi))
    return;  // outside the address space: no lock lies there
  for (int k = 0; k < g_nrules; ++k) {
    Rule& r = g_rules[k];
    if (!wants_symbols(r.matcher) || !symbol_kind_fits(r.matcher, s.type)) continue;
    if (symbol_matches(s.name, r.name)) add_range(r, lo, hi);
  }
}

// The file of a loaded object, when it may be opened: the executable
// through the kernel's own link to it, any other object by its absolute
// path. A name that is not absolute is never opened: it would be looked up
// from the working directory, where anyone may have left a file of that
// name (the vDSO's "linux-vdso.so.1" is a name, not a file).
const char* object_file(const dl_phdr_info* info) {
  const char* name = info->dlpi_name;
  if (name == nullptr || name[0] == '\0') return "/proc/self/exe";
  return name[0] == '/' ? name : nullptr;
}

// Where a loaded object's file offset 0 is mapped (its ELF header), from
// its first PT_LOAD segment; 0 when it has none.
uintptr_t image_start(const dl_phdr_info* info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) return info->dlpi_addr + ph.p_vaddr - ph.p_offset;
  }
  return 0;
}

// The vDSO, from its image in memory (AT_SYSINFO_EHDR): it has no file.
// The image runs from its header to the end of its last PT_LOAD segment
// (the program headers the dynamic linker read, not the image's own copy).
void scan_vdso(const dl_phdr_info* info, uintptr_t start) {
  uintptr_t end = start;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    uintptr_t seg_end = info->dlpi_addr + ph.p_vaddr + ph.p_memsz;
    if (ph.p_type == PT_LOAD && seg_end > end) end = seg_end;
  }
  uintptr_t bias = info->dlpi_addr;
  elf::for_each_symbol(reinterpret_cast<const char*>(start), end - start, elf::Layout::image, match_symbol, &bias);
}

// Any other object: its file's static and dynamic symbol tables, mapped
// read-only for the scan.
void scan_file(const dl_phdr_info* info) {
  const char* path = object_file(info);
  if (path == nullptr) return;
  // O_NONBLOCK: a FIFO left where a library was must not hang the start-up.
  int fd = nocancel::open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return;  // a file gone since it was loaded
  struct stat st;
  void* map = MAP_FAILED;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
    map = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  nocancel::close(fd);
  if (map == MAP_FAILED) return;
  size_t size = static_cast<size_t>(st.st_size);
  uintptr_t bias = info->dlpi_addr;
  elf::for_each_symbol(static_cast<const char*>(map), size, elf::Layout::file, match_symbol, &bias);
  munmap(map, size);
}

void resolve_symbols(const dl_phdr_info* info) {
  uintptr_t start = image_start(info);
  if (start != 0 && start == getauxval(AT_SYSINFO_EHDR)) scan_vdso(info, start);
  else scan_file(info);
}

int resolve_object(dl_phdr_info* info, size_t, void*) {
  bool symbols = false;
  for (int k = 0; k < g_nrules; ++k) {
    Rule& r = g_rules[k];
    if (r.matcher == Matcher::tranche) continue;  // names, checked by preload/lwlock/
    if (wants_symbols(r.matcher)) symbols = true;
    else if (module_matches(info, r.name) && r.matcher == Matcher::site) resolve_site(r, info);
    else if (module_matches(info, r.name)) add_range(r, info->dlpi_addr + r.offset_lo, info->dlpi_addr + r.offset_hi);
  }
  if (symbols) resolve_symbols(info);
  return 0;
}

// A rule that matches nothing is most often a typo: said once, not fatal (the
// lock it meant may live in a library loaded later, which is not searched).
void warn_rule(int k, const char* what) {
  diag("lockswap: LOCKSWAP_SELECT: rule ");
  int n = k + 1;  // at most kMaxRules
  char digits[3] = {static_cast<char>(n >= 10 ? '0' + n / 10 : '0' + n), static_cast<char>(n >= 10 ? '0' + n % 10 : '\0'), '\0'};
  diag(digits);
  diag(what);
  diag_untrusted(g_rules[k].name, strlen(g_rules[k].name));  // the user's bytes: no escape sequence reaches a terminal
  diag(")\n");
}

void warn_unresolved() {
  for (int k = 0; k < g_nrules; ++k) {
    if (g_rules[k].matcher == Matcher::tranche) continue;
    if (g_rules[k].nranges == 0) warn_rule(k, " matches nothing in the objects loaded at start-up (");
    if (g_rules[k].ranges_dropped) warn_rule(k, " matches more than 128 definitions: only the first 128 are used (");
  }
}

bool contains(const Rule& r, uintptr_t a) {
  for (int i = 0; i < r.nranges; ++i)
    if (a >= r.ranges[i].lo && a < r.ranges[i].hi) return true;
  return false;
}

}  // namespace

void load() {
  const char* text = secure_getenv(kVar);
  if (text == nullptr || *text == '\0') return;
  for (const char* s = text; *s != '\0';) {
    const char* end = strchr(s, ';');
    size_t n = end ? static_cast<size_t>(end - s) : strlen(s);
    if (n != 0) parse_rule(s, n, text);
    s += n + (end ? 1 : 0);
  }
  dl_iterate_phdr(resolve_object, nullptr);
  warn_unresolved();
}

bool active(Family f) { return g_active[static_cast<int>(f)]; }

// A rule names a tranche by its name, or by that name + "Lock" for the
// individual locks (tranche ProcArray is ProcArrayLock in PostgreSQL's source).
static bool names_tranche(const char* rule, const char* tranche) {
  size_t n = strlen(tranche);
  return strncmp(rule, tranche, n) == 0 && (rule[n] == '\0' || strcmp(rule + n, "Lock") == 0);
}

uint8_t decide_tranche(const char* name, int* rule) {
  for (int i = 0; i < g_nrules; ++i) {
    const Rule& r = g_rules[i];
    if (r.family != Family::lwlock || !names_tranche(r.name, name)) continue;
    if (rule != nullptr) *rule = i;
    return r.variant;
  }
  if (rule != nullptr) *rule = -1;
  return 0;
}

const char* tranche_rule_name(int rule) {
  return rule >= 0 && rule < g_nrules && g_rules[rule].family == Family::lwlock ? g_rules[rule].name : nullptr;
}

uint8_t decide(Family f, const void* object, uintptr_t site, int* rule) {
  if (rule != nullptr) *rule = -1;
  auto obj = reinterpret_cast<uintptr_t>(object);
  for (int k = 0; k < g_nrules; ++k) {
    const Rule& r = g_rules[k];
    if (r.family != f) continue;
    bool hit = false;
    switch (r.matcher) {
      case Matcher::sym:
      case Matcher::range: hit = contains(r, obj); break;
      case Matcher::site: hit = contains(r, site); break;
      case Matcher::func: hit = site != 0 && contains(r, site - 1); break;  // the call instruction's byte
      case Matcher::tranche: break;  // decide_tranche()
    }
    if (hit) {
      if (rule != nullptr) *rule = k;
      return r.variant;
    }
  }
  return 0;
}

int rule_count() { return g_nrules; }
const char* rule_text(int rule) { return rule >= 0 && rule < g_nrules ? g_rules[rule].text : ""; }

}  // namespace lockswap::select
