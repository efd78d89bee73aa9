// preload/lwlock/redirect.cpp — find, verify and redirect the LWLock API of
// the main program (redirect.h; docs/lwlock.md).
#include "preload/lwlock/redirect.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>

#include "preload/diag.h"
#include "preload/lwlock/allowlist.h"

#ifndef PR_GET_MDWE
#define PR_GET_MDWE 66  // Linux 6.3; Debian 12's headers predate it
#endif

namespace lockswap::lwlock {
namespace {

constexpr const char* kNames[kRedirected] = {
#define NAME(name, fn, args) #name,
    LOCKSWAP_LWLOCK_FUNCTIONS(NAME)
#undef NAME
};

// A program built to test the redirection (tests/lwlock/) exports this
// symbol, whose value is its offsetof(PGPROC, pgprocno) stand-in: it is its
// own allow-list entry, its entries checked against its own file. A
// PostgreSQL never exports it.
constexpr const char* kSyntheticMarker = "lockswap_lwlock_synthetic_target";

#if defined(__x86_64__)
constexpr Isa kIsa = Isa::x86_64;
constexpr bool kCanRedirect = true;
#elif defined(__aarch64__)
constexpr Isa kIsa = Isa::aarch64;
constexpr bool kCanRedirect = true;
#else
constexpr Isa kIsa = Isa::x86_64;
constexpr bool kCanRedirect = false;  // no redirection on this ISA
#endif

struct MainProgram {
  const dl_phdr_info* info = nullptr;
  char build_id[2 * 64 + 1] = "";
};
MainProgram g_program;  // verify() fills it; redirect() names it when it refuses

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

// The main program's loaded segment holding [a, a + n), executable or any.
const ElfW(Phdr)* main_segment(uintptr_t a, size_t n, bool text) {
  const dl_phdr_info* info = g_program.info;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && (!text || (ph.p_flags & PF_X)) && a >= lo && a + n <= lo + ph.p_memsz) return &ph;
  }
  return nullptr;
}

// The main program's definition of `name`, or null: a library of the global
// scope that exports the same name is not the program.
void* main_symbol(const char* name) {
  void* p = dlsym(RTLD_DEFAULT, name);
  return p != nullptr && main_segment(reinterpret_cast<uintptr_t>(p), 1, false) != nullptr ? p : nullptr;
}

constexpr const char* kUnverifiedAdvice =
    "lockswap redirects LWLocks only in builds it has verified (preload/lwlock/allowlist.h): unset\n"
    "  LOCKSWAP_LWLOCK to run this server unchanged, or add this build as docs/lwlock.md, \"Adding a build\", says.\n";

[[noreturn]] void refuse(const char* why, const char* function, const char* advice = kUnverifiedAdvice) {
  diag("lockswap: LOCKSWAP_LWLOCK: this PostgreSQL (build-id ");
  diag(g_program.build_id[0] != '\0' ? g_program.build_id : "none");
  diag(") ");
  diag(why);
  if (function != nullptr) {
    diag(" (");
    diag(function);
    diag(")");
  }
  diag(".\n  ");
  diag(advice);
  _exit(2);
}

const AllowedBuild* allowed() {
  for (const AllowedBuild& b : kAllowedBuilds)
    if (b.isa == kIsa && strcmp(b.build_id, g_program.build_id) == 0) return &b;
  return nullptr;
}

// Where the main program's address `a`, in segment `ph`, lies in its file.
off_t file_offset(const ElfW(Phdr)& ph, uintptr_t a) {
  return static_cast<off_t>(ph.p_offset + (a - g_program.info->dlpi_addr - ph.p_vaddr));
}

// The executable file, read where the kernel reads an instruction a uprobe
// replaced. Only for the synthetic target, which is on no allow-list.
bool read_from_file(uintptr_t a, unsigned char* out, size_t n) {
  const ElfW(Phdr)* ph = main_segment(a, n, true);
  if (ph == nullptr) return false;
  int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  off_t at = file_offset(*ph, a);
  bool ok = pread(fd, out, n, at) == static_cast<ssize_t>(n);
  close(fd);
  return ok;
}

// The entry holds its original bytes, or a uprobe's breakpoint in place of
// the first instruction (a tracer attached before the server started).
bool entry_matches(const unsigned char* mem, const EntryBytes& original, const KeptInstruction& kept) {
  const unsigned from = uprobe_breakpoint(kIsa, mem) ? kept.length : 0;
  return from <= kEntryBytes && memcmp(mem + from, original.b + from, kEntryBytes - from) == 0;
}

// ------------------------------------------------ may this process rewrite its text

constexpr const char* kNoRewriteAdvice =
    "Redirecting LWLocks rewrites the first bytes of the server's own functions, which this process may\n"
    "  not do: a systemd unit's MemoryDenyWriteExecute=yes, prctl(PR_SET_MDWE) or SELinux without execmod for\n"
    "  this binary forbids making written code executable. Set MemoryDenyWriteExecute=no for this service (or\n"
    "  allow execmod), or unset LOCKSWAP_LWLOCK to run the server unchanged (docs/lwlock.md, \"Redirection\").\n";

// One page of the executable, mapped apart and rewritten as redirect() will
// rewrite the real text: whatever forbids it (MDWE by prctl or by a seccomp
// filter, SELinux execmod on this file) forbids it here first, before any
// entry has been touched. Where the page cannot be had (no /proc), there is
// no answer: redirect() still stops at the first refused mprotect, before
// main, so no half-written text ever runs.
const char* text_rewrite_refused(uintptr_t entry) {
  const ElfW(Phdr)* ph = main_segment(entry, 1, true);
  const long page = sysconf(_SC_PAGESIZE);
  int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (ph == nullptr || fd < 0) {
    if (fd >= 0) close(fd);
    return nullptr;
  }
  const off_t at = file_offset(*ph, entry) & ~(page - 1);
  void* p = mmap(nullptr, static_cast<size_t>(page), PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, at);
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  const char* why = nullptr;
  if (mprotect(p, static_cast<size_t>(page), PROT_READ | PROT_WRITE) != 0) {
    why = "may not make its text writable (mprotect refused)";
  } else {
    *static_cast<volatile unsigned char*>(p) = *static_cast<unsigned char*>(p);
    if (mprotect(p, static_cast<size_t>(page), PROT_READ | PROT_EXEC) != 0)
      why = prctl(PR_GET_MDWE, 0, 0, 0, 0) > 0 ? "runs with MemoryDenyWriteExecute (prctl PR_SET_MDWE): written code may not be made executable"
                                               : "may not make written code executable again (mprotect refused: MemoryDenyWriteExecute or SELinux execmod)";
  }
  munmap(p, static_cast<size_t>(page));
  return why;
}

bool write_patch(uintptr_t entry, const Patch& patch, unsigned from) {
  const long page = sysconf(_SC_PAGESIZE);
  uintptr_t lo = entry & ~static_cast<uintptr_t>(page - 1);
  uintptr_t hi = (entry + patch.length + page - 1) & ~static_cast<uintptr_t>(page - 1);
  void* at = reinterpret_cast<void*>(lo);
  if (mprotect(at, hi - lo, PROT_READ | PROT_WRITE) != 0) return false;
  memcpy(reinterpret_cast<unsigned char*>(entry) + from, patch.bytes + from, patch.length - from);
  bool ok = mprotect(at, hi - lo, PROT_READ | PROT_EXEC) == 0;
  __builtin___clear_cache(reinterpret_cast<char*>(entry), reinterpret_cast<char*>(entry + patch.length));
  return ok && memcmp(reinterpret_cast<unsigned char*>(entry) + from, patch.bytes + from, patch.length - from) == 0;
}

}  // namespace

Found verify(Verified& out) {
  dl_iterate_phdr(first_object, &g_program);
  if (g_program.info == nullptr) return Found::not_postgres;
  unsigned exported = 0;
  for (unsigned i = 0; i < kRedirected; ++i) {
    out.entry[i] = reinterpret_cast<uintptr_t>(main_symbol(kNames[i]));
    exported += out.entry[i] != 0;
  }
  if (exported == 0) return Found::not_postgres;
  if (exported != kRedirected) refuse("exports only part of the LWLock API", nullptr);
  if constexpr (!kCanRedirect) refuse("runs on an instruction set lockswap cannot redirect", nullptr);
  const AllowedBuild* build = allowed();
  // A test program (tests/lwlock) declares itself with this symbol of its
  // own, whose value is its offsetof(PGPROC, pgprocno) stand-in; a library
  // that exports it cannot vouch for the program.
  const auto* synthetic = static_cast<const uint32_t*>(main_symbol(kSyntheticMarker));
  if (build == nullptr && synthetic == nullptr) refuse("is not a build lockswap has verified", nullptr);
  for (unsigned i = 0; i < kRedirected; ++i) {
    Dl_info where;
    void* symbol = nullptr;
    const auto* mem = reinterpret_cast<const unsigned char*>(out.entry[i]);
    if (dladdr1(mem, &where, &symbol, RTLD_DL_SYMENT) == 0 || symbol == nullptr ||
        static_cast<const ElfW(Sym)*>(symbol)->st_size < kEntryBytes || main_segment(out.entry[i], kEntryBytes, true) == nullptr)
      refuse("has an LWLock function lockswap cannot redirect", kNames[i]);
    if (build != nullptr) {
      out.original[i] = from_hex(build->entry[i]);
    } else if (!read_from_file(out.entry[i], out.original[i].b, kEntryBytes)) {
      refuse("cannot read an LWLock entry from its executable", kNames[i]);
    }
    out.kept[i] = keep_first_instruction(kIsa, out.original[i].b, kArgKinds[i]);
    if (out.kept[i].length == 0) refuse("starts an LWLock function with an instruction lockswap cannot keep in place", kNames[i]);
    if (!entry_matches(mem, out.original[i], out.kept[i]))
      refuse(build != nullptr ? "does not hold the verified instructions at an entry" : "does not hold its file's instructions at an entry",
             kNames[i]);
  }
  if (const char* why = text_rewrite_refused(out.entry[0])) refuse(why, nullptr, kNoRewriteAdvice);
  out.pgprocno_offset = build != nullptr ? build->pgprocno_offset : *synthetic;
  out.label = build != nullptr ? build->label : "synthetic test target";
  return Found::verified;
}

void redirect(const Verified& v, void* const (&replacement)[kRedirected]) {
  for (unsigned i = 0; i < kRedirected; ++i) {
    const Patch p = make_patch(kIsa, v.original[i].b, v.kept[i], reinterpret_cast<uint64_t>(replacement[i]));
    // The kept instruction is not written: a breakpoint a tracer put there stays.
    if (!write_patch(v.entry[i], p, v.kept[i].length)) refuse("could not be rewritten (mprotect refused)", kNames[i], kNoRewriteAdvice);
  }
}

}  // namespace lockswap::lwlock
