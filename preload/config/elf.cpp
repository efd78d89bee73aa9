// preload/config/elf.cpp — the ELF symbol reader (preload/config/elf.h):
// the section headers' symbol tables of a file, the dynamic symbol table of
// a loaded image (the vDSO). Every offset it follows is checked first.
#include "preload/config/elf.h"

#include <elf.h>
#include <link.h>
#include <string.h>

namespace lockswap::select {

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

}  // namespace lockswap::select
