#pragma once
#ifndef LOCKSWAP_ARCH_PUBLIC_HEADER
#error "Do not include arch/x86_64/isa_relax.h directly; include arch/relax.h"
#endif
namespace lockswap::arch::isa {
inline void cpu_relax() { __builtin_ia32_pause(); }
}  // namespace lockswap::arch::isa
