// arch/relax.h — what a spinning CPU does between two polls.
// The ISA file is picked by CMake through the include path (arch/<isa>/isa_relax.h).
#pragma once
#define LOCKSWAP_ARCH_PUBLIC_HEADER
#include "isa_relax.h"
#undef LOCKSWAP_ARCH_PUBLIC_HEADER

namespace lockswap::arch {
// Spin-wait hint: frees pipeline resources for the SMT sibling and, on x86,
// avoids the memory-order machine clear when the polled line changes.
inline void cpu_relax() { isa::cpu_relax(); }
}  // namespace lockswap::arch
