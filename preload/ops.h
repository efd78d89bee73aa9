// preload/ops.h — the dispatch table: the one path from a pthread / C11 /
// semaphore call to a variant.
//
// Every exported function (preload/exports.cpp) is one indirect jump through
// `g_ops`, a table with one pointer per interposed function, filled once from
// the registry when the configuration is read (preload/ops.cpp, from the
// families' entry points, preload/pthread/families.h). Until then every pointer is a
// first-call stub that reads it and re-dispatches, so a lock taken by another
// library's constructor before ours works.
#pragma once
#include "preload/real.h"

namespace lockswap {

// Hidden: the exports reach it PC-relative, one jump, no GOT load.
extern OpsTable g_ops __attribute__((visibility("hidden")));

}  // namespace lockswap
