// preload/config/select.cpp — LOCKSWAP_SELECT: parsing the rules and resolving them
// to addresses once, when the configuration is read.
//
// Runs where load_config runs (perhaps inside another library's constructor,
// before malloc may be used): it allocates nothing. Rules and their resolved
// address ranges live in fixed static tables; the ELF files of the loaded
// objects are mapped read-only, scanned for the names the rules ask for, and
// unmapped (the vDSO, which has no file, is read in memory). Their bytes are
// not trusted: the reader (namespace elf) checks every offset it follows.
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

// ------------------------------------------------------------ ELF reading

namespace elf {
namespace {

// The class and byte order of this process: an object of another could not
// have been loaded into it.
constexpr unsigned char kNativeClass = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;
constexpr unsigned char kNativeData = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
// An offset or a count that is not there (no input is 2^64 bytes long).
constexpr uint64_t kNowhere = UINT64_MAX;
constexpr uint64_t kGnuHashHeaderWords = 4;  // nbuckets, symoffset, bloom size, bloom shift

// [offset, offset + count * each) lies inside [0, size). Written so that no
// term wraps around 2^64: a crafted offset near 2^64 plus a size must not
// pass as a small end.
bool fits(size_t size, uint64_t offset, uint64_t count, uint64_t each) {
  uint64_t len;
  return !__builtin_mul_overflow(count, each, &len) && offset <= size && len <= size - offset;
}

// `count` objects of type T at `offset`, or null when they do not fit or
// are misaligned (never so in a real object; reading them in place would be
// undefined behaviour).
template <class T>
const T* table_at(const char* bytes, size_t size, uint64_t offset, uint64_t count) {
  if (!fits(size, offset, count, sizeof(T))) return nullptr;
  const char* at = bytes + offset;
  if (reinterpret_cast<uintptr_t>(at) % alignof(T) != 0) return nullptr;
  return reinterpret_cast<const T*>(at);
}

struct SymbolTable {
  const ElfW(Sym)* syms;
  uint64_t count;
  const char* names;  // its string table
  uint64_t names_size;
};

// Both tables checked to lie inside the bytes; false when one does not.
bool make_table(const char* bytes, size_t size, uint64_t syms, uint64_t count, uint64_t names, uint64_t names_size,
                SymbolTable& t) {
  t = {table_at<ElfW(Sym)>(bytes, size, syms, count), count, table_at<char>(bytes, size, names, names_size),
       names_size};
  return t.syms != nullptr && t.names != nullptr && names_size != 0;
}

void visit_table(const SymbolTable& t, SymbolVisitor visit, void* context) {
  for (uint64_t i = 0; i < t.count; ++i) {
    const ElfW(Sym)& s = t.syms[i];
    if (s.st_shndx == SHN_UNDEF || s.st_size == 0 || s.st_name >= t.names_size) continue;
    const char* name = t.names + s.st_name;
    if (memchr(name, '\0', t.names_size - s.st_name) == nullptr) continue;  // would run off its table
    visit({name, s.st_value, s.st_size, static_cast<unsigned>(ELF64_ST_TYPE(s.st_info))}, context);
  }
}

// A file: every SHT_SYMTAB and SHT_DYNSYM section, with the string table its
// sh_link names.
int scan_sections(const char* bytes, size_t size, const ElfW(Ehdr)& eh, SymbolVisitor visit, void* context) {
  if (eh.e_shentsize != sizeof(ElfW(Shdr))) return 0;
  const auto* sh = table_at<ElfW(Shdr)>(bytes, size, eh.e_shoff, eh.e_shnum);
  if (sh == nullptr) return 0;
  int tables = 0;
  for (unsigned i = 0; i < eh.e_shnum; ++i) {
    const ElfW(Shdr)& syms = sh[i];
    if ((syms.sh_type != SHT_SYMTAB && syms.sh_type != SHT_DYNSYM) || syms.sh_link >= eh.e_shnum ||
        syms.sh_entsize != sizeof(ElfW(Sym)))
      continue;
    const ElfW(Shdr)& names = sh[syms.sh_link];
    SymbolTable t;
    if (!make_table(bytes, size, syms.sh_offset, syms.sh_size / sizeof(ElfW(Sym)), names.sh_offset, names.sh_size, t))
      continue;
    visit_table(t, visit, context);
    ++tables;
  }
  return tables;
}

// A loaded image holds link-time addresses; it begins where file offset 0
// is mapped, at its first PT_LOAD's p_vaddr - p_offset.
struct Image {
  const char* bytes;
  size_t size;
  uint64_t base;
  uint64_t offset(uint64_t vaddr) const { return vaddr >= base ? vaddr - base : kNowhere; }
};

// What the dynamic section says of the dynamic symbol table, as offsets
// into the image (kNowhere: absent).
struct DynamicSymbols {
  uint64_t symtab = kNowhere, strtab = kNowhere, strsz = 0, syment = sizeof(ElfW(Sym));
  uint64_t hash = kNowhere, gnu_hash = kNowhere;
};

bool read_dynamic(const Image& im, const ElfW(Phdr)& dynamic, DynamicSymbols& d) {
  uint64_t n = dynamic.p_filesz / sizeof(ElfW(Dyn));
  const auto* dyn = table_at<ElfW(Dyn)>(im.bytes, im.size, im.offset(dynamic.p_vaddr), n);
  if (dyn == nullptr) return false;
  for (uint64_t i = 0; i < n && dyn[i].d_tag != DT_NULL; ++i) {
    uint64_t v = dyn[i].d_un.d_val;
    switch (dyn[i].d_tag) {
      case DT_SYMTAB: d.symtab = im.offset(v); break;
      case DT_STRTAB: d.strtab = im.offset(v); break;
      case DT_STRSZ: d.strsz = v; break;
      case DT_SYMENT: d.syment = v; break;
      case DT_HASH: d.hash = im.offset(v); break;
      case DT_GNU_HASH: d.gnu_hash = im.offset(v); break;
      default: break;
    }
  }
  return true;
}

// DT_HASH: its second word, nchain, is the number of symbols.
uint64_t count_from_hash(const Image& im, uint64_t at) {
  const auto* words = table_at<uint32_t>(im.bytes, im.size, at, 2);
  return words != nullptr ? words[1] : kNowhere;
}

// DT_GNU_HASH keeps no count: the symbols end with the chain of the highest
// bucket, whose last entry has bit 0 set. Every step is bounds-checked, so a
// chain without an end stops at the end of the bytes.
uint64_t count_from_gnu_hash(const Image& im, uint64_t at) {
  const auto* head = table_at<uint32_t>(im.bytes, im.size, at, kGnuHashHeaderWords);
  if (head == nullptr) return kNowhere;
  uint64_t nbuckets = head[0], symoffset = head[1], bloom_bytes = uint64_t{head[2]} * sizeof(ElfW(Addr));
  uint64_t buckets_at = at + kGnuHashHeaderWords * sizeof(uint32_t);  // fits: the header lay inside
  if (__builtin_add_overflow(buckets_at, bloom_bytes, &buckets_at)) return kNowhere;
  const auto* buckets = table_at<uint32_t>(im.bytes, im.size, buckets_at, nbuckets);
  if (buckets == nullptr) return kNowhere;
  uint64_t last = 0;
  for (uint64_t b = 0; b < nbuckets; ++b) last = buckets[b] > last ? buckets[b] : last;
  if (last < symoffset) return symoffset;  // every bucket empty: only the unhashed symbols
  uint64_t chain_at = buckets_at + nbuckets * sizeof(uint32_t);
  for (uint64_t i = last;; ++i) {
    const auto* chain = table_at<uint32_t>(im.bytes, im.size, chain_at, i - symoffset + 1);
    if (chain == nullptr) return kNowhere;
    if ((chain[i - symoffset] & 1) != 0) return i + 1;
  }
}

// A loaded image: its dynamic symbol table, found as the dynamic linker
// finds it, through PT_DYNAMIC. Section headers are not needed at run time
// and nothing promises they are mapped (the vDSO's lie at the end of its
// image today, on some kernels in the mapping and on others not); PT_DYNAMIC
// lies inside a PT_LOAD segment by construction. The symbol count comes
// from DT_HASH, or DT_GNU_HASH when that is the only one.
int scan_image(const char* bytes, size_t size, const ElfW(Ehdr)& eh, SymbolVisitor visit, void* context) {
  if (eh.e_phentsize != sizeof(ElfW(Phdr))) return 0;
  const auto* ph = table_at<ElfW(Phdr)>(bytes, size, eh.e_phoff, eh.e_phnum);
  if (ph == nullptr) return 0;
  const ElfW(Phdr)* load = nullptr;
  const ElfW(Phdr)* dynamic = nullptr;
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    if (ph[i].p_type == PT_LOAD && load == nullptr) load = &ph[i];
    if (ph[i].p_type == PT_DYNAMIC) dynamic = &ph[i];
  }
  if (load == nullptr || dynamic == nullptr || load->p_vaddr < load->p_offset) return 0;
  Image im{bytes, size, load->p_vaddr - load->p_offset};
  DynamicSymbols d;
  if (!read_dynamic(im, *dynamic, d) || d.syment != sizeof(ElfW(Sym))) return 0;
  uint64_t count = d.hash != kNowhere ? count_from_hash(im, d.hash) : count_from_gnu_hash(im, d.gnu_hash);
  SymbolTable t;
  if (count == kNowhere || !make_table(bytes, size, d.symtab, count, d.strtab, d.strsz, t)) return 0;
  visit_table(t, visit, context);
  return 1;
}

}  // namespace

int for_each_symbol(const char* bytes, size_t size, Layout layout, SymbolVisitor visit, void* context) {
  const auto* eh = table_at<ElfW(Ehdr)>(bytes, size, 0, 1);
  if (eh == nullptr || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != kNativeClass ||
      eh->e_ident[EI_DATA] != kNativeData)
    return 0;
  return layout == Layout::file ? scan_sections(bytes, size, *eh, visit, context)
                                : scan_image(bytes, size, *eh, visit, context);
}

}  // namespace elf

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
