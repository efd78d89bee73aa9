// tests/torture/c11_ops.cpp — the C11 class: mtx_* and cnd_* objects, run by the
// mutex and condvar operations (mutex_ops.cpp, cond_ops.cpp) with the C11 kinds.
#include "torture.h"

namespace torture {

const ClassRegistration kC11Ops(K_C11, [](Rng& r, sem_t*) {
  if (r.chance(2)) op_mutex(r, *pick(r, g_c11m));
  else op_cond(r, *pick(r, g_c11c));
});

}  // namespace torture
