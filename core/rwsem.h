// core/rwsem.h — the public path of the rw_semaphore: core/rwsem/rwsem.h.
#pragma once
#include "core/rwsem/rwsem.h"  // IWYU pragma: export
