// preload/self_check.h — the glibc facts lockswap's fast paths read
// (preload/glibc_facts.h), checked on the running glibc before main.
//
// The version check (preload/config/config.cpp) trusts a version string; this looks
// at glibc's behaviour itself, on every glibc, checked or not: on the calling
// thread, through glibc's own functions (preload/real.h), in microseconds,
// with no allocation and no thread.
#pragma once

namespace lockswap::self_check {

// Checks every fact (thread_pointer, cancel_word, mutex_kind, mutex_owner,
// rwlock_fields, sem_fields, zero_init, rseq); on the first that differs, says which on stderr (what
// was read, what was expected, what to do) and exits with status 2. No
// setting overrides it: with a fact wrong, lockswap would corrupt locks.
// Called by load_config() after the version check.
void refuse_if_glibc_differs();

}  // namespace lockswap::self_check
