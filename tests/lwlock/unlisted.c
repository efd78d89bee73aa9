/* tests/lwlock/unlisted.c — a program that exports the whole LWLock API but
 * is on no allow-list and does not declare itself a synthetic target, as an
 * unknown PostgreSQL build: with LOCKSWAP_LWLOCK set lockswap must refuse it
 * (exit 2, the build refusal) before running any of its code (its
 * GetLWLockIdentifier exits 3), even when a library of the global scope
 * exports the synthetic marker (synthetic_marker.c). */
#define FAKE_POSTGRES_UNLISTED
#include "tests/lwlock/fake_postgres.h"

int main(void) { return 0; }
