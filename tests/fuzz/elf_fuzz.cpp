// tests/fuzz/elf_fuzz.cpp — libFuzzer target for the ELF symbol reader of
// preload/config/elf.cpp (select::elf::for_each_symbol), which LOCKSWAP_SELECT's
// sym:/func: rules run over the files of the loaded objects and over the
// vDSO's image in memory, before main.
//
// Input: the bytes of an object, read both as a file (section headers) and
// as a loaded image (PT_DYNAMIC). The oracle: no read outside the input
// (AddressSanitizer: libFuzzer hands it over in a heap block of exactly its
// size), no undefined behaviour (UBSan: a wrapped offset, a misaligned
// table), and every symbol reported has a name that ends inside the input.
//
// Known answers, checked once at start-up so that a reader that finds
// nothing cannot pass: this very program's file holds
// LLVMFuzzerTestOneInput, and the vDSO's image holds its clock_gettime,
// found through DT_HASH and again through DT_GNU_HASH alone.
// With ELF_FUZZ_SEEDS=DIR set, the start-up also writes the vDSO's image
// there as a seed (run_fuzz.sh does).
//
// elf.cpp is compiled in as it is; it calls nothing else of the library.
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "preload/config/elf.h"

namespace {

using lockswap::select::elf::for_each_symbol;
using lockswap::select::elf::Layout;
using lockswap::select::elf::Symbol;

struct Seen {
  const char* bytes;
  size_t size;
  const char* want;  // a name to look for (known answers), or null
  size_t symbols = 0;
  bool found = false;
};

void check(const Symbol& s, void* context) {
  auto& seen = *static_cast<Seen*>(context);
  const char* end = seen.bytes + seen.size;
  if (s.name < seen.bytes || s.name >= end || memchr(s.name, '\0', static_cast<size_t>(end - s.name)) == nullptr) {
    fprintf(stderr, "elf_fuzz: a symbol name outside the input\n");
    abort();
  }
  if (s.size == 0) {
    fprintf(stderr, "elf_fuzz: a symbol of size 0 reported\n");
    abort();
  }
  ++seen.symbols;
  if (seen.want != nullptr && strcmp(s.name, seen.want) == 0) seen.found = true;
}

[[noreturn]] void known_answer_failed(const char* what) {
  fprintf(stderr, "elf_fuzz: known answer failed: %s\n", what);
  exit(1);
}

// The program's own file, as select.cpp reads an object's file for elf.cpp.
void expect_own_file() {
  int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) known_answer_failed("cannot open /proc/self/exe");
  auto size = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) known_answer_failed("cannot map /proc/self/exe");
  Seen seen{static_cast<const char*>(map), size, "LLVMFuzzerTestOneInput"};
  if (for_each_symbol(seen.bytes, size, Layout::file, check, &seen) == 0 || !seen.found)
    known_answer_failed("LLVMFuzzerTestOneInput not found in the program's own file");
  munmap(map, size);
}

// The vDSO's image: from its header to the end of its last PT_LOAD.
std::string vdso_image() {
  auto ehdr = static_cast<uintptr_t>(getauxval(AT_SYSINFO_EHDR));
  if (ehdr == 0) return {};
  const auto* eh = reinterpret_cast<const ElfW(Ehdr)*>(ehdr);
  const auto* ph = reinterpret_cast<const ElfW(Phdr)*>(ehdr + eh->e_phoff);
  uintptr_t base = 0, end = 0;
  bool first = true;
  for (int i = 0; i < eh->e_phnum; ++i) {
    if (ph[i].p_type != PT_LOAD) continue;
    if (first) base = ph[i].p_vaddr - ph[i].p_offset;
    first = false;
    if (ph[i].p_vaddr + ph[i].p_memsz - base > end) end = ph[i].p_vaddr + ph[i].p_memsz - base;
  }
  return std::string(reinterpret_cast<const char*>(ehdr), end);
}

#if defined(__x86_64__)
constexpr const char* kVdsoClock = "__vdso_clock_gettime";
#else
constexpr const char* kVdsoClock = "__kernel_clock_gettime";
#endif

// The symbols of an image (the answer: its clock_gettime is one of them).
size_t image_symbols(const std::string& image, const char* what) {
  Seen seen{image.data(), image.size(), kVdsoClock};
  if (for_each_symbol(image.data(), image.size(), Layout::image, check, &seen) != 1 || !seen.found)
    known_answer_failed(what);
  return seen.symbols;
}

// The image's DT_HASH entry turned into one the reader ignores (DT_DEBUG),
// so that it must count the symbols through DT_GNU_HASH; false when the
// image has not both.
bool hide_sysv_hash(std::string& image) {
  const auto* eh = reinterpret_cast<const ElfW(Ehdr)*>(image.data());
  const auto* ph = reinterpret_cast<const ElfW(Phdr)*>(image.data() + eh->e_phoff);
  uint64_t base = UINT64_MAX, dyn_at = 0, dyn_size = 0;
  for (int i = 0; i < eh->e_phnum; ++i) {
    if (ph[i].p_type == PT_LOAD && base == UINT64_MAX) base = ph[i].p_vaddr - ph[i].p_offset;
    if (ph[i].p_type == PT_DYNAMIC) dyn_at = ph[i].p_vaddr, dyn_size = ph[i].p_filesz;
  }
  if (dyn_size == 0 || dyn_at - base + dyn_size > image.size()) return false;
  auto* dyn = reinterpret_cast<ElfW(Dyn)*>(&image[dyn_at - base]);
  ElfW(Dyn)* sysv = nullptr;
  bool gnu = false;
  for (size_t i = 0; i < dyn_size / sizeof *dyn && dyn[i].d_tag != DT_NULL; ++i) {
    if (dyn[i].d_tag == DT_HASH) sysv = &dyn[i];
    if (dyn[i].d_tag == DT_GNU_HASH) gnu = true;
  }
  if (sysv == nullptr || !gnu) return false;
  sysv->d_tag = DT_DEBUG;
  return true;
}

void expect_vdso() {
  std::string image = vdso_image();
  if (image.empty()) return;  // no vDSO here (some emulators)
  size_t symbols = image_symbols(image, "the vDSO's clock_gettime not found in its image");
  std::string gnu_only = image;
  if (hide_sysv_hash(gnu_only) &&
      image_symbols(gnu_only, "the vDSO's clock_gettime not found through DT_GNU_HASH") != symbols)
    known_answer_failed("DT_GNU_HASH and DT_HASH count the vDSO's symbols differently");
  if (const char* dir = getenv("ELF_FUZZ_SEEDS")) {
    std::string path = std::string(dir) + "/vdso-image";
    if (FILE* f = fopen(path.c_str(), "wb")) {
      fwrite(image.data(), 1, image.size(), f);
      fclose(f);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  expect_own_file();
  expect_vdso();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* bytes = reinterpret_cast<const char*>(data);
  for (Layout layout : {Layout::file, Layout::image}) {
    Seen seen{bytes, size, nullptr};
    for_each_symbol(bytes, size, layout, check, &seen);
  }
  return 0;
}
