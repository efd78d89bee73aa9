#pragma once
#ifndef LOCKSWAP_ARCH_PUBLIC_HEADER
#error "Do not include arch/aarch64/isa_relax.h directly; include arch/relax.h"
#endif
namespace lockswap::arch::isa {
// YIELD is a no-op on most cores; ISB gives a real (~tens of ns) back-off, as
// used by the kernel's and Rust's spin-loop hint on arm64.
inline void cpu_relax() { __asm__ __volatile__("isb" ::: "memory"); }
}  // namespace lockswap::arch::isa
