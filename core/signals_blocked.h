// core/signals_blocked.h — a scope in which no signal handler runs on this
// thread.
//
// For the few internal sections that hold a lock which is not re-entrant
// (the thread registry's, core/thread_registry.cpp): a handler that calls an
// async-signal-safe function lockswap interposes (sem_post, poll under the
// switch model) may reach the same lock, and a thread cannot wait for itself.
// Blocking every signal for the section is the plain fix; the cost, two
// system calls, is paid once per thread (registration, exit), never on a
// lock's own path. pthread_sigmask is async-signal-safe and leaves glibc's
// internal signals (cancellation, setxid) deliverable; neither of their
// handlers enters lockswap. docs/signal-safety.md has the rule and every
// internal lock.
#pragma once
#include <pthread.h>
#include <signal.h>

namespace lockswap {

class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old_);
  }
  ~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t old_;
};

}  // namespace lockswap
