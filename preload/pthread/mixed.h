// preload/pthread/mixed.h — LOCKSWAP_SELECT's per-lock tables (preload/pthread/mixed.cpp).
#pragma once
#include "preload/real.h"

namespace lockswap {

// Turns the families named by rules in `t` (the process-wide table, complete)
// into mixed ones: each object slot reads the object's selection tag and
// jumps through that variant's table. Runs its set-up once.
void install_mixed(OpsTable& t);

}  // namespace lockswap
