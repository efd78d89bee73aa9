// preload/lwlock/allowlist.h — the PostgreSQL builds whose LWLock entries
// lockswap may redirect.
//
// An entry is one binary: its GNU build-id, the first bytes of each
// redirected function (pg15.h, in LOCKSWAP_LWLOCK_FUNCTIONS order) and the
// offset of PGPROC.pgprocno. Redirection happens only when the running
// program's build-id is here and every entry still holds those bytes, so an
// unknown build, or a known one altered on disk or in memory, is refused
// before main (docs/lwlock.md). tools/lwlock/allowlist_entry.py prints an
// entry; docs/lwlock.md, "Adding a build", says how to check it.
#pragma once
#include <cstdint>

#include "preload/lwlock/pg15.h"

namespace lockswap::lwlock {

enum class Isa : uint8_t { x86_64, aarch64 };

inline constexpr unsigned kEntryBytes = 16;  // compared; the jump itself is 14 (x86-64) or 16 (arm64)

struct AllowedBuild {
  const char* build_id;  // hex, as `readelf -n` prints it
  const char* label;
  Isa isa;
  uint32_t pgprocno_offset;
  const char* entry[kRedirected];  // hex, kEntryBytes each
};

inline constexpr AllowedBuild kAllowedBuilds[] = {
  {"44c007cfee140e4c25e8a434008096828e70a92c", "15.18 Debian 12 amd64", Isa::x86_64, 0x48,
   {
       "554889e54157415641554154534883ec",  // LWLockAcquire, 422 bytes
       "55448b0d48b042004889e54181f9c700",  // LWLockConditionalAcquire, 156 bytes
       "554889e54157415641554154534883ec",  // LWLockAcquireOrWait, 428 bytes
       "554889e541574156415541bd01000000",  // LWLockWaitForVar, 421 bytes
       "554889e541554989d541544989f45348",  // LWLockUpdateVar, 563 bytes
       "55488d35889d42004889e54157415641",  // LWLockRelease, 954 bytes
       "554889e541554989d541544989f45348",  // LWLockReleaseClearVar, 57 bytes
       "8b050aa6420085c07e4e554889e55348",  // LWLockReleaseAll, 89 bytes
       "48631549a5420085d27e2d488d05be98",  // LWLockHeldByMe, 59 bytes
       "486315a9a4420085d27e35488d051e98",  // LWLockHeldByMeInMode, 67 bytes
       "4863f64c630506a542004989d2480faf",  // LWLockAnyHeldByMe, 94 bytes
       "8b05aaa5420085c07e46554889e54156",  // ForEachLWLockHeldByMe, 81 bytes
   }},
};

}  // namespace lockswap::lwlock
