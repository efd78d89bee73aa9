#pragma once
#ifndef LOCKSWAP_ARCH_PUBLIC_HEADER
#error "Do not include arch/generic/isa_relax.h directly; include arch/relax.h"
#endif
namespace lockswap::arch::isa {
inline void cpu_relax() { __asm__ __volatile__("" ::: "memory"); }
}  // namespace lockswap::arch::isa
