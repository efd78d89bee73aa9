/* tests/lwlock/partial_api.c — a program that exports LWLockAcquire alone:
 * with LOCKSWAP_LWLOCK set, lockswap must refuse it (exit 2) rather than
 * redirect half an API. */
#define FAKE_POSTGRES_PARTIAL
#include "tests/lwlock/fake_postgres.h"

int main(void) { return 0; }
