// preload/lwlock/redirect.cpp — find, verify and redirect the LWLock API of
// the main program (redirect.h; docs/lwlock.md).
#include "preload/lwlock/redirect.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "preload/diag.h"
#include "preload/lwlock/allowlist.h"

namespace lockswap::lwlock {
namespace {

constexpr const char* kNames[kRedirected] = {
#define NAME(name, fn) #name,
    LOCKSWAP_LWLOCK_FUNCTIONS(NAME)
#undef NAME
};

// A program built to test the redirection (tests/lwlock/) declares itself
// with this symbol, whose value is its offsetof(PGPROC, pgprocno) stand-in:
// it is its own allow-list entry. A PostgreSQL never exports it.
constexpr const char* kSyntheticMarker = "lockswap_lwlock_synthetic_target";

#if defined(__x86_64__)
constexpr Isa kIsa = Isa::x86_64;
constexpr unsigned kJumpBytes = 14;
void encode_jump(unsigned char* at, uint64_t target) {
  static constexpr unsigned char kJmpRip[] = {0xff, 0x25, 0, 0, 0, 0};  // jmp *0(%rip)
  memcpy(at, kJmpRip, sizeof kJmpRip);
  memcpy(at + sizeof kJmpRip, &target, sizeof target);
}
#elif defined(__aarch64__)
constexpr Isa kIsa = Isa::aarch64;
constexpr unsigned kJumpBytes = 16;
void encode_jump(unsigned char* at, uint64_t target) {
  static constexpr uint32_t kLdrBr[] = {0x58000050u, 0xd61f0200u};  // ldr x16, #8; br x16
  memcpy(at, kLdrBr, sizeof kLdrBr);
  memcpy(at + sizeof kLdrBr, &target, sizeof target);
}
#else
constexpr unsigned kJumpBytes = 0;  // no redirection on this ISA
#endif

struct MainProgram {
  const dl_phdr_info* info = nullptr;
  char build_id[2 * 64 + 1] = "";
};

void hex(const unsigned char* p, size_t n, char* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  out[2 * n] = '\0';
}

void read_build_id(const dl_phdr_info* info, char* out) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    auto* p = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
    const unsigned char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) n;
      memcpy(&n, p, sizeof n);
      const unsigned char* name = p + sizeof n;
      const unsigned char* desc = name + ((n.n_namesz + 3) & ~3u);
      if (desc + n.n_descsz > end) break;
      if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && memcmp(name, "GNU", 4) == 0 && n.n_descsz <= 64) {
        hex(desc, n.n_descsz, out);
        return;
      }
      p = desc + ((n.n_descsz + 3) & ~3u);
    }
  }
}

int first_object(dl_phdr_info* info, size_t, void* data) {
  auto* m = static_cast<MainProgram*>(data);
  static dl_phdr_info copy;  // the callback's info does not outlive it
  copy = *info;
  m->info = &copy;
  read_build_id(info, m->build_id);
  return 1;  // the main program comes first
}

bool in_main_text(const dl_phdr_info* info, uintptr_t a, size_t n) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) && a >= lo && a + n <= lo + ph.p_memsz) return true;
  }
  return false;
}

[[noreturn]] void refuse(const MainProgram& m, const char* why, const char* function) {
  diag("lockswap: LOCKSWAP_LWLOCK: this PostgreSQL (build-id ");
  diag(m.build_id[0] != '\0' ? m.build_id : "none");
  diag(") ");
  diag(why);
  if (function != nullptr) {
    diag(" (");
    diag(function);
    diag(")");
  }
  diag(".\n  lockswap redirects LWLocks only in builds it has verified (preload/lwlock/allowlist.h): unset\n"
       "  LOCKSWAP_LWLOCK to run this server unchanged, or add this build as docs/lwlock.md, \"Adding a build\", says.\n");
  _exit(2);
}

const AllowedBuild* allowed(const MainProgram& m) {
  for (const AllowedBuild& b : kAllowedBuilds)
    if (b.isa == kIsa && strcmp(b.build_id, m.build_id) == 0) return &b;
  return nullptr;
}

bool write_jump(uintptr_t entry, uint64_t target) {
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t lo = entry & ~static_cast<uintptr_t>(page - 1);
  uintptr_t hi = (entry + kJumpBytes + page - 1) & ~static_cast<uintptr_t>(page - 1);
  void* at = reinterpret_cast<void*>(lo);
  if (mprotect(at, hi - lo, PROT_READ | PROT_WRITE) != 0) return false;
  encode_jump(reinterpret_cast<unsigned char*>(entry), target);
  bool ok = mprotect(at, hi - lo, PROT_READ | PROT_EXEC) == 0;
  __builtin___clear_cache(reinterpret_cast<char*>(entry), reinterpret_cast<char*>(entry + kJumpBytes));
  return ok;
}

}  // namespace

Found redirect(void* const (&replacement)[kRedirected], Redirection& out) {
  MainProgram m;
  dl_iterate_phdr(first_object, &m);
  void* entry[kRedirected];
  unsigned exported = 0;
  for (unsigned i = 0; i < kRedirected; ++i) {
    entry[i] = dlsym(RTLD_DEFAULT, kNames[i]);
    exported += entry[i] != nullptr;
  }
  if (exported == 0 || m.info == nullptr) return Found::not_postgres;
  if (exported != kRedirected) refuse(m, "exports only part of the LWLock API", nullptr);
  if constexpr (kJumpBytes == 0) refuse(m, "runs on an instruction set lockswap cannot redirect", nullptr);
  const AllowedBuild* build = allowed(m);
  const auto* synthetic = static_cast<const uint32_t*>(dlsym(RTLD_DEFAULT, kSyntheticMarker));
  if (build == nullptr && synthetic == nullptr) refuse(m, "is not a build lockswap has verified", nullptr);
  for (unsigned i = 0; i < kRedirected; ++i) {
    Dl_info where;
    void* symbol = nullptr;
    auto a = reinterpret_cast<uintptr_t>(entry[i]);
    const auto* sym = static_cast<const ElfW(Sym)*>(symbol);
    if (dladdr1(entry[i], &where, &symbol, RTLD_DL_SYMENT) == 0 || (sym = static_cast<const ElfW(Sym)*>(symbol)) == nullptr ||
        sym->st_size < kJumpBytes || !in_main_text(m.info, a, kEntryBytes))
      refuse(m, "has an LWLock function lockswap cannot redirect", kNames[i]);
    if (build == nullptr) continue;
    char bytes[2 * kEntryBytes + 1];
    hex(reinterpret_cast<const unsigned char*>(a), kEntryBytes, bytes);
    if (strcmp(bytes, build->entry[i]) != 0) refuse(m, "does not hold the verified instructions at an entry", kNames[i]);
  }
  for (unsigned i = 0; i < kRedirected; ++i)
    if (!write_jump(reinterpret_cast<uintptr_t>(entry[i]), reinterpret_cast<uint64_t>(replacement[i])))
      refuse(m, "could not be rewritten (mprotect refused)", kNames[i]);
  out.pgprocno_offset = build != nullptr ? build->pgprocno_offset : *synthetic;
  out.label = build != nullptr ? build->label : "synthetic test target";
  return Found::redirected;
}

}  // namespace lockswap::lwlock
