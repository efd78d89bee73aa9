// preload/lwlock/allowlist.h — the PostgreSQL builds whose LWLock entries
// lockswap may redirect.
//
// An entry is one binary: its GNU build-id, the first bytes of each
// redirected function (pg15.h, in LOCKSWAP_LWLOCK_FUNCTIONS order) and the
// offset of PGPROC.pgprocno. Redirection happens only when the running
// program's build-id is here and every entry still holds those bytes, so an
// unknown build, or a known one altered on disk or in memory, is refused
// before main (docs/lwlock.md). Every entry's first instruction must be one
// entry_patch.h can keep in place (checked below, at compile time). tools/lwlock/allowlist_entry.py prints an
// entry, tools/lwlock/check_entries.py checks what it assumes; docs/lwlock.md,
// "Adding a build", says how.
#pragma once
#include <cstdint>

#include "preload/lwlock/entry_patch.h"
#include "preload/lwlock/pg15.h"

namespace lockswap::lwlock {


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
       "554889e54157415641554154534883ec08488b1df0b24200",  // LWLockAcquire, 422 bytes
       "55448b0d48b042004889e54181f9c70000000f8f4679ccff",  // LWLockConditionalAcquire, 156 bytes
       "554889e54157415641554154534883ec08448b0598af4200",  // LWLockAcquireOrWait, 428 bytes
       "554889e541574156415541bd010000004154534883ec188b",  // LWLockWaitForVar, 421 bytes
       "554889e541554989d541544989f4534889fb4883ec08e8a5",  // LWLockUpdateVar, 563 bytes
       "55488d35889d42004889e54157415641554154534889fb48",  // LWLockRelease, 954 bytes
       "554889e541554989d541544989f4534889fb4883ec08e8a5",  // LWLockReleaseClearVar, 57 bytes
       "8b050aa6420085c07e4e554889e553488d1d7a9942004883",  // LWLockReleaseAll, 89 bytes
       "48631549a5420085d27e2d488d05be98420048c1e2044801",  // LWLockHeldByMe, 59 bytes
       "486315a9a4420085d27e35488d051e98420048c1e2044801",  // LWLockHeldByMeInMode, 67 bytes
       "4863f64c630506a542004989d2480faff24c8d0c374585c0",  // LWLockAnyHeldByMe, 94 bytes
       "8b05aaa5420085c07e46554889e541564989f641554989fd",  // ForEachLWLockHeldByMe, 81 bytes
   }},
  {"a6ade789dddc8ae8e6d07de24f7f2c32d0f38b1d", "15.20 Debian 12 amd64", Isa::x86_64, 0x48,
   {
       "554889e54157415641554154534883ec08488b1d80034300",  // LWLockAcquire, 422 bytes
       "55448b0dd80043004889e54181f9c70000000f8fc8fecbff",  // LWLockConditionalAcquire, 156 bytes
       "554889e54157415641554154534883ec08448b0528004300",  // LWLockAcquireOrWait, 428 bytes
       "554889e541574156415541bd010000004154534883ec188b",  // LWLockWaitForVar, 421 bytes
       "554889e541554989d541544989f4534889fb4883ec08e8a5",  // LWLockUpdateVar, 563 bytes
       "55488d3518ee42004889e54157415641554154534889fb48",  // LWLockRelease, 954 bytes
       "554889e541554989d541544989f4534889fb4883ec08e8a5",  // LWLockReleaseClearVar, 57 bytes
       "8b059af6420085c07e4e554889e553488d1d0aea42004883",  // LWLockReleaseAll, 89 bytes
       "486315d9f5420085d27e2d488d054ee9420048c1e2044801",  // LWLockHeldByMe, 59 bytes
       "48631539f5420085d27e35488d05aee8420048c1e2044801",  // LWLockHeldByMeInMode, 67 bytes
       "4863f64c630596f542004989d2480faff24c8d0c374585c0",  // LWLockAnyHeldByMe, 94 bytes
       "8b053af6420085c07e46554889e541564989f641554989fd",  // ForEachLWLockHeldByMe, 81 bytes
   }},
  {"aa17bc080e6a467aebc11c83fba3a6f216e647d7", "15.18 Debian 12 arm64", Isa::aarch64, 0x48,
   {
       "fd7bbaa96223009043a00c91fd0300918222009042b847f9",  // LWLockAcquire, 700 bytes
       "fd7bbca9fd030091f76303a977230090e2a20c91f35301a9",  // LWLockConditionalAcquire, 380 bytes
       "fd7bbba9fd030091f76303a97823009003a30c9182220090",  // LWLockAcquireOrWait, 692 bytes
       "fd7bb9a9652200f0a55443f9fd030091f35301a9f55b02a9",  // LWLockWaitForVar, 456 bytes
       "fd7bbba9fd030091f35301a9f30301aaf40300aaf55b02a9",  // LWLockUpdateVar, 596 bytes
       "fd7bbba9462300f0c1a00c91fd030091f35301a923e00091",  // LWLockRelease, 1052 bytes
       "fd7bbda9fd030091f35301a9f40301aaf30300aaf51300f9",  // LWLockReleaseClearVar, 68 bytes
       "fd7bbda9fd030091f35301a9542300f094a20c91803640b9",  // LWLockReleaseAll, 108 bytes
       "412300f021a00c91233440b97f0000718d01005421e00091",  // LWLockHeldByMe, 72 bytes
       "422300f042a00c91443440b99f000071ed01005442e00091",  // LWLockHeldByMeInMode, 84 bytes
       "432300f063a00c91217c4093673440b92600029bff000071",  // LWLockAnyHeldByMe, 108 bytes
       "fd7bbca9fd030091f55b02a9552300f0b5a20c91f60300aa",  // ForEachLWLockHeldByMe, 108 bytes
   }},
  {"bf0526105c5821cfa3993f9bc694829b7f0b5edf", "15.20 Debian 12 arm64", Isa::aarch64, 0x48,
   {
       "fd7bbaa9222300d043a01291fd030091422200d042bc47f9",  // LWLockAcquire, 700 bytes
       "fd7bbca9fd030091f76303a9372300d0e2a21291f35301a9",  // LWLockConditionalAcquire, 380 bytes
       "fd7bbba9fd030091f76303a9382300d003a31291422200d0",  // LWLockAcquireOrWait, 692 bytes
       "fd7bb9a9452200d0a54c43f9fd030091f35301a9f55b02a9",  // LWLockWaitForVar, 456 bytes
       "fd7bbba9fd030091f35301a9f30301aaf40300aaf55b02a9",  // LWLockUpdateVar, 596 bytes
       "fd7bbba9262300b0c1a01291fd030091f35301a923e00091",  // LWLockRelease, 1052 bytes
       "fd7bbda9fd030091f35301a9f40301aaf30300aaf51300f9",  // LWLockReleaseClearVar, 68 bytes
       "fd7bbda9fd030091f35301a9342300b094a21291803640b9",  // LWLockReleaseAll, 108 bytes
       "212300b021a01291233440b97f0000718d01005421e00091",  // LWLockHeldByMe, 72 bytes
       "222300b042a01291443440b99f000071ed01005442e00091",  // LWLockHeldByMeInMode, 84 bytes
       "232300b063a01291217c4093673440b92600029bff000071",  // LWLockAnyHeldByMe, 108 bytes
       "fd7bbca9fd030091f55b02a9352300b0b5a21291f60300aa",  // ForEachLWLockHeldByMe, 108 bytes
   }},
};

// Every allow-listed entry starts with an instruction the patch can keep in
// place, and the patch fits in the bytes compared.
constexpr bool every_entry_keeps_its_first_instruction() {
  for (const AllowedBuild& b : kAllowedBuilds)
    for (unsigned i = 0; i < kRedirected; ++i) {
      const EntryBytes e = from_hex(b.entry[i]);
      const KeptInstruction k = keep_first_instruction(b.isa, e.b, kArgKinds[i]);
      if (k.length == 0 || make_patch(b.isa, e.b, k, 0).length > kEntryBytes) return false;
    }
  return true;
}
static_assert(every_entry_keeps_its_first_instruction());

}  // namespace lockswap::lwlock
