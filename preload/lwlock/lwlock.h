// preload/lwlock/lwlock.h — the LWLock family as the rest of the library
// sees it: started before main (preload/boot.cpp); its statistics are a
// section of every dump (preload/lwlock/lwlock.cpp).
#pragma once
#include <cstdint>

#include "preload/config/registry.h"

namespace lockswap::lwlock {

// LOCKSWAP_LWLOCK (and LOCKSWAP_SELECT's lwlock rules): with anything but
// `off` and no rule, nothing happens; otherwise a PostgreSQL that exports
// the LWLock API is redirected (or refused, exit 2) before main.
void start(LwlockVariant chosen);

bool redirected();
const char* build_label();  // the allow-list entry in use

}  // namespace lockswap::lwlock
