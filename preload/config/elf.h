// preload/config/elf.h — the ELF symbol reader LOCKSWAP_SELECT's sym: and
// func: rules are resolved with (preload/config/select.cpp), apart from the
// rule grammar: it knows ELF, not rules.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lockswap::select {

// sym:/func: rules are resolved from the symbol tables of the loaded objects:
// their files, mapped read-only, and the vDSO's image in memory. The bytes
// are untrusted (a file may have been crafted or replaced since it was
// loaded): every offset, size and count is checked against `size` without
// overflow, and every name is NUL-terminated inside its string table, so
// that no input makes the reader touch a byte outside [bytes, bytes + size).
// Pure: no state, no allocation, no system call (tests/fuzz/elf_fuzz.cpp).
namespace elf {

enum class Layout : uint8_t {
  file,   // an ELF file: its section headers' SHT_SYMTAB and SHT_DYNSYM
  image,  // a loaded image (the vDSO): PT_DYNAMIC's dynamic symbol table
};

struct Symbol {
  const char* name;  // NUL-terminated inside the bytes
  uint64_t value;    // st_value: a link-time address
  uint64_t size;     // never 0
  unsigned type;     // STT_*
};

using SymbolVisitor = void (*)(const Symbol& symbol, void* context);

// Calls `visit` for each defined symbol with a size of every symbol table
// found; returns how many tables were read (0: not a native ELF object, or
// nothing usable in it).
int for_each_symbol(const char* bytes, size_t size, Layout layout, SymbolVisitor visit, void* context);

}  // namespace elf

}  // namespace lockswap::select
