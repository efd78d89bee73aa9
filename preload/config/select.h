// preload/config/select.h — LOCKSWAP_SELECT: a variant per lock, chosen by rules.
//
// A rule names a family, a variant and one matcher (docs/select.md):
//   mutex=rwsem@sym:LOCK_table_cache;rwlock=percid@site:mysqld+0x4a1f20
// Rules are parsed and resolved once, when the configuration is read: symbol
// and function names become address ranges (the ELF symbol tables of every
// object loaded then), `module+offset` sites become addresses. Nothing here
// runs on a lock path except decide(), which the dispatcher calls once per
// object, at its first sight (init, or the first call on a zero-filled or
// statically initialised object); the answer is kept in the object itself
// (preload/abi.h: the selection tags), so later calls read a tag, never a rule.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/lock_events.h"
#include "core/thread_registry.h"

namespace lockswap::select {

inline constexpr int kMaxRules = 16;

enum class Family : uint8_t { mutex, rwlock, sem, lwlock };

// Reads LOCKSWAP_SELECT (called by load_config, before any family is
// published): a malformed rule prints the valid forms and exits with 2.
void load();

// True when a rule names this family: its functions go through the mixed
// entry points (preload/pthread/mixed.cpp). False for every family without
// LOCKSWAP_SELECT, and then nothing changes anywhere.
bool active(Family f);

// The variant (the family's enum value, 1..) of the first rule that matches
// an object at `object` first seen from the call whose return address is
// `site`; 0 when none does (the process-wide variant applies). `rule`, when
// given, receives that rule's index (-1: none).
uint8_t decide(Family f, const void* object, uintptr_t site, int* rule = nullptr);

// PostgreSQL LWLock tranches (preload/lwlock/): the variant of the first
// `lwlock=VARIANT@tranche:NAME` rule naming this tranche, 0 when none does.
uint8_t decide_tranche(const char* name, int* rule = nullptr);
// The tranche name of lwlock rule `rule`; nullptr for any other rule.
const char* tranche_rule_name(int rule);

// The rules as written (index as decide() gives it), for the statistics.
int rule_count();
const char* rule_text(int rule);



// The return address of the interposed call's caller as a profiling wrapper
// saw it (preload/stats/stats.cpp): the wrapper sits between that caller and the
// mixed entry, which therefore asks here. 0 outside a wrapper.
extern __thread uintptr_t t_site_hint __attribute__((tls_model("initial-exec")));

// The caller of an exported function, from inside a function the export
// reached by a tail jump. Exports that may not throw reach it through a call
// instead (`sub $8,%rsp; call *g_ops(%rip)`): then the caller's return
// address is the export's own one, two words above the canonical frame
// address. Checked against the instruction bytes; any other shape keeps the
// immediate return address.
__attribute__((always_inline)) inline uintptr_t caller_ip(void* ra, void* cfa) {
  auto r = reinterpret_cast<uintptr_t>(ra);
#if defined(__x86_64__)
  static constexpr unsigned char kStub[] = {0x48, 0x83, 0xec, 0x08, 0xff, 0x15};
  constexpr uintptr_t kPage = 4096;  // the bytes read must lie in the return address's own page
  if ((r & (kPage - 1)) >= 10 && memcmp(reinterpret_cast<const void*>(r - 10), kStub, sizeof kStub) == 0)
    return *reinterpret_cast<const uintptr_t*>(static_cast<char*>(cfa) + 8);
#else
  (void)cfa;
#endif
  return r;
}

}  // namespace lockswap::select
