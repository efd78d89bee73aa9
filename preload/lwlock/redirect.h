// preload/lwlock/redirect.h — sending a verified PostgreSQL's LWLock entry
// points to lockswap's functions (docs/lwlock.md, "Redirection").
//
// Runs once, in the library's constructor (load_config), before main: the
// postmaster is single-threaded then, and every backend inherits the
// redirected text across fork(). Only the main program is considered, and
// only when it exports the whole LWLock API.
//
// Two steps, so that nothing of an unverified binary runs: verify() reads
// the program (build-id, allow-list, the bytes at every entry, whether this
// process may rewrite its text) and runs none of its code; only after it
// may lockswap call into the server (GetLWLockIdentifier) and redirect().
// Each entry keeps its first instruction and is followed by an absolute
// jump (entry_patch.h), so an entry uprobe still works.
#pragma once
#include <cstdint>

#include "preload/lwlock/entry_patch.h"
#include "preload/lwlock/pg15.h"

namespace lockswap::lwlock {

struct Verified {
  uint32_t pgprocno_offset;  // offsetof(PGPROC, pgprocno) of this build
  const char* label;         // the allow-list entry's label
  uintptr_t entry[kRedirected];
  EntryBytes original[kRedirected];  // the entries' first bytes as the file has them
  KeptInstruction kept[kRedirected];
};

enum class Found : uint8_t {
  not_postgres,  // the main program does not export the LWLock API: leave it alone
  verified,
};

// A program that exports the API but is not an allowed build, whose entries
// differ from the allow-list's bytes, or whose text this process may not
// rewrite (MemoryDenyWriteExecute, SELinux execmod) stops the process with
// exit status 2 and a message naming its build-id and what to do.
Found verify(Verified& out);

// Redirects every function of LOCKSWAP_LWLOCK_FUNCTIONS to `replacement`
// (same order).
void redirect(const Verified& v, void* const (&replacement)[kRedirected]);

}  // namespace lockswap::lwlock
