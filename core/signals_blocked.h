// core/signals_blocked.h — a scope in which no signal handler runs on this
// thread.
//
// For the few internal sections that hold a lock which is not re-entrant
// (the thread registry's, core/thread_registry.cpp): a handler that calls an
// async-signal-safe function lockswap interposes (sem_post, poll under the
// switch model) may reach the same lock, and a thread cannot wait for itself.
// Blocking every signal for the section is the plain fix; the cost, two
// system calls however deeply the scopes nest, is paid once per thread
// (registration, exit), never on a lock's own path. pthread_sigmask is
// async-signal-safe and leaves glibc's internal signals (cancellation,
// setxid) deliverable; neither of their handlers enters lockswap.
// docs/signal-safety.md has the rule and every internal lock.
//
// Scopes nest (registration and thread exit block signals around sections
// that take the registry lock, whose guard blocks them again): a per-thread
// depth lets only the outermost scope make the system calls; an inner one
// finds every signal blocked already. The depth is touched by this thread
// alone, and by handlers that run on it, so it needs no atomic operation,
// only two orderings:
//  - entering, the mask changes before the depth counts the scope; leaving,
//    the depth is given back before the mask is restored. So every signal
//    is blocked whenever the depth is above zero: no handler runs inside a
//    scope, and none interrupts the increment or the decrement.
//  - a handler can thus only run where the depth is zero, e.g. between the
//    outermost constructor's test of the depth and its pthread_sigmask. Its
//    own scopes, nested or not, find zero, block and restore for
//    themselves, and give every count back before it returns; the
//    interrupted constructor then blocks and counts as if nothing ran. A
//    handler that leaves by longjmp cannot leave a scope open: scopes are
//    lockswap's own sections, which never jump, and no further signal
//    arrives inside one.
// The signal fences keep the compiler from moving the depth's accesses
// across the mask changes (the handler is this thread: no CPU fence needed).
#pragma once
#include <pthread.h>
#include <signal.h>

#include <atomic>

namespace lockswap {

// Open SignalsBlocked scopes on this thread (initial-exec: no allocation, no
// lazy TLS set-up, which is not async-signal-safe).
inline __thread unsigned t_signals_blocked_depth __attribute__((tls_model("initial-exec"))) = 0;

class SignalsBlocked {
 public:
  SignalsBlocked() {
    if (t_signals_blocked_depth == 0) {
      sigset_t all;
      sigfillset(&all);
      pthread_sigmask(SIG_BLOCK, &all, &old_);
      outermost_ = true;
    }
    std::atomic_signal_fence(std::memory_order_seq_cst);
    ++t_signals_blocked_depth;
  }
  ~SignalsBlocked() {
    --t_signals_blocked_depth;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (outermost_) pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t old_;
  bool outermost_ = false;  // made the system call, so restores the mask
};

}  // namespace lockswap
