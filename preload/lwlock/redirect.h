// preload/lwlock/redirect.h — sending a verified PostgreSQL's LWLock entry
// points to lockswap's functions (docs/lwlock.md, "Redirection").
//
// Runs once, in the library's constructor (load_config), before main: the
// postmaster is single-threaded then, and every backend inherits the
// redirected text across fork(). Only the main program is considered, and
// only when it exports the whole LWLock API. Each entry is overwritten with
// an absolute jump (x86-64: `jmp *0(%rip)` + address, 14 bytes; arm64:
// `ldr x16, 8; br x16` + address, 16 bytes, then the instruction cache is
// cleaned), so no instruction of the original function ever runs again and
// none is moved.
#pragma once
#include <cstdint>

#include "preload/lwlock/pg15.h"

namespace lockswap::lwlock {

struct Redirection {
  uint32_t pgprocno_offset;  // offsetof(PGPROC, pgprocno) of this build
  const char* label;         // the allow-list entry's label
};

enum class Found : uint8_t {
  not_postgres,  // the program does not export the LWLock API: leave it alone
  redirected,
};

// Redirects every function of LOCKSWAP_LWLOCK_FUNCTIONS to `replacement`
// (same order). A program that exports the API but is not an allowed build,
// or whose entries differ from the allow-list's bytes, stops the process
// with exit status 2 and a message naming its build-id and what to do.
Found redirect(void* const (&replacement)[kRedirected], Redirection& out);

}  // namespace lockswap::lwlock
