// core/cancel.h — where an asynchronous cancellation may land in lock code.
//
// Design
// ------
// A thread with asynchronous cancellation may be cancelled at any instruction.
// Lock code is not async-cancel-safe anywhere but in its futex sleep: a
// cancellation between a fast path's atomic and its slow path (an rwsem
// reader's bias added and not yet taken back), while holding a wait_lock or
// the thread-registry lock, or half-way through a queue update would leave a
// lock unusable. And an unwind that starts at a non-call instruction of a
// frame with cleanups (an LSDA) finds no call-site entry there and
// terminates the process.
//
// So lock code never runs with the asynchronous type. A caller that has it
// (known cheaply from `t_async_type`, kept by preload's interposed
// pthread_setcanceltype, see preload/exports.cpp) has its acquisition run
// inside a DeferredScope:
//   * the type is switched to deferred; `t_async_sleeps` is set;
//   * every lock sleep (WaitCtx::sleep) sees `t_async_sleeps` and enables the
//     asynchronous type around the futex system call alone, in
//     `async_sleep_frame`, a function without cleanups: the unwind leaves it
//     and enters the sleeping lock's own unwind guards at a call site (the
//     syscall is made through a potentially-throwing pointer, arch/futex.h);
//     back from the sleep the type is deferred again before any lock code
//     runs, and a cancellation that arrived meanwhile waits;
//   * at the end the caller's asynchronous type is restored. That acts on a
//     pending cancellation right there, where the lock state is consistent;
//     if the call acquired the lock, a C cleanup buffer gives it back first, as if the
//     cancellation had acted while the thread still waited (what glibc's
//     lock does with a thread cancelled in its sleep).
// Condition and semaphore waits are cancellation points for every type; they
// enable the asynchronous type around their own sleep (preload's
// CancellableSleeper) and do not use `t_async_sleeps`.
//
// Cost for a thread of the default (deferred) type: one initial-exec TLS
// load and a not-taken branch on each blocking lock call, nothing else.
//
// The core types are not async-cancel-safe by themselves: a caller with the
// asynchronous type must enter them through run_deferred (preload's native
// entry points do; so do the core tests that cancel asynchronously). rwsem's
// slow paths also open a DeferredScope of their own, which keeps its
// wait_lock sections safe for the calls preload does not wrap (unlock, the
// mutex try calls); scopes nest (an inner scope finds the type already
// deferred and does nothing). Unlock calls are not wrapped: POSIX does not
// make them async-cancel-safe, and wrapping them would cost every caller
// (three instructions per pair). The slow paths with cleanups they can reach
// defer for themselves instead, each behind a cleanup-free frame (rwsem's
// SlowPaths open their scope before calling into frames with cleanups; a
// thread of the asynchronous type borrows an id instead of entering the id
// allocator's refill or global take, and skips its clock check:
// core/cid/). The rwlock try calls are wrapped
// (preload/pthread/rwlock.cpp, NativeRwlock): percid's runs a writer's drain under a
// guard, and a cancellation landing there terminated the process.
//
// No call made while the type is asynchronous may go through a PLT stub.
// The linker gives stubs no unwind information on aarch64 (x86-64's ld
// generates it; aarch64's does not), and an unwind whose first frame's pc
// has no FDE reports end-of-stack: glibc's stop function then longjmps
// straight to the thread's start, running the C cleanup buffers but no C++
// destructor, so no lock guard and none of the caller's pthread_cleanup_push
// handlers (C++ builds them as destructors). Natively the window is a few
// instructions; under qemu-user, which delivers signals at translation-block
// starts, the first instruction of a stub is a likely landing point
// (qemu/behaviour_sem's racing post/cancel lost its cleanup that way). So
// every type switch of lock code goes through `set_type`, an indirect call
// through a pointer loaded in the caller's own frame into the target's code
// (which has CFI), and arch/futex.h reads errno the same way.
//
// Memory order: both flags are the calling thread's own (TLS), read and
// written only by it; no ordering with other threads is involved.
#pragma once
#include <pthread.h>
#include <setjmp.h>

namespace lockswap::cancel {

// pthread_setcanceltype as the dynamic linker binds it for this object
// (preload's interposer in liblockswap, glibc's in a program linked with the
// core alone). A static relocation: set before any constructor runs.
// Volatile keeps the compiler from turning the call back into a direct one
// (through the PLT).
using SetTypeFn = int (*)(int, int*);
inline SetTypeFn volatile g_set_type = &pthread_setcanceltype;

// pthread_setcanceltype without a PLT stub in the way (see above).
inline int set_type(int type, int* old_type) { return g_set_type(type, old_type); }

// Mirror of the calling thread's cancellation type, written only by preload's
// pthread_setcanceltype after glibc's succeeded (false: deferred, the type
// every thread starts with). Static TLS: reading it never allocates.
inline __thread bool t_async_type __attribute__((tls_model("initial-exec")));

// Set while lock code runs deferred on behalf of a caller that had the
// asynchronous type: its futex sleeps enable that type around the syscall.
inline __thread bool t_async_sleeps __attribute__((tls_model("initial-exec")));

inline bool async_caller() { return __builtin_expect(t_async_type, 0); }

class DeferredScope {
 public:
  DeferredScope() {
    set_type(PTHREAD_CANCEL_DEFERRED, &old_);
    if (async()) t_async_sleeps = true;
  }
  DeferredScope(const DeferredScope&) = delete;
  DeferredScope& operator=(const DeferredScope&) = delete;
  bool async() const { return old_ == PTHREAD_CANCEL_ASYNCHRONOUS; }

  // Restore the caller's type (normal exits only: an unwind never comes
  // back). May act on a cancellation that arrived while deferred, here.
  // Nested scopes (rwsem's inside run_deferred) find the type deferred and
  // do nothing; only run_deferred's restore runs lock code's last
  // instructions with the asynchronous type, and it does so without cleanups.
  void restore() const {
    if (!async()) return;
    t_async_sleeps = false;
    int t;
    set_type(PTHREAD_CANCEL_ASYNCHRONOUS, &t);
  }

 private:
  int old_ = PTHREAD_CANCEL_DEFERRED;
};

// Runs f in a frame of its own, so that the unwind guards of f's body stay
// out of the caller's frame (run_deferred's must have no cleanups).
template <class F>
__attribute__((noinline)) int call_in_own_frame(F& f) {
  return f();
}

// Brings back the caller's asynchronous type after an acquisition that did
// not take the lock. A frame without cleanups: once the type is asynchronous
// every instruction until the caller's code may be where a cancellation
// lands, and an unwind that starts at a non-call instruction of a frame with
// an LSDA terminates the process.
__attribute__((noinline)) inline int restore_async(int rc) {
  t_async_sleeps = false;
  int t;
  set_type(PTHREAD_CANCEL_ASYNCHRONOUS, &t);
  return rc;
}

}  // namespace lockswap::cancel

// glibc's C cleanup-buffer interface (what pthread_cleanup_push expands to in
// C; <pthread.h> declares it for C and C++ without exceptions only). It needs
// no LSDA: the unwind's stop function longjmps into the buffer.
extern "C" {
void __pthread_register_cancel(__pthread_unwind_buf_t* buf);
void __pthread_unregister_cancel(__pthread_unwind_buf_t* buf);
[[noreturn]] void __pthread_unwind_next(__pthread_unwind_buf_t* buf);
}

namespace lockswap::cancel {

// The same after an acquisition that took the lock: if the cancellation acts
// while the type comes back, the lock is given back first (as if it had
// landed while the thread still waited). A C++ guard would put an LSDA on
// this frame, so a C cleanup buffer does it: registered around the switch,
// it also covers a landing on any instruction until it is unregistered; after
// that the lock is the caller's, as after any acquisition by a thread of the
// asynchronous type.
template <class GiveBack>
__attribute__((noinline)) int restore_async_holding(int rc, GiveBack& give_back) {
  __pthread_unwind_buf_t buf;
  if (__builtin_expect(__sigsetjmp(reinterpret_cast<struct __jmp_buf_tag*>(buf.__cancel_jmp_buf), 0), 0)) {
    give_back();
    __pthread_unwind_next(&buf);
  }
  __pthread_register_cancel(&buf);
  t_async_sleeps = false;
  int t;
  set_type(PTHREAD_CANCEL_ASYNCHRONOUS, &t);
  __pthread_unregister_cancel(&buf);
  return rc;
}

// Run `call` (an acquisition returning 0 when it took the lock) for a caller
// with the asynchronous type, as described above. No cleanups in this frame:
// the acquisition runs in its own, and the type comes back in the tail call.
template <class Call, class GiveBack>
__attribute__((noinline)) int run_deferred(Call&& call, GiveBack&& give_back) {
  int old;
  set_type(PTHREAD_CANCEL_DEFERRED, &old);
  if (old != PTHREAD_CANCEL_ASYNCHRONOUS) return call_in_own_frame(call);
  t_async_sleeps = true;
  int rc = call_in_own_frame(call);
  if (rc != 0) return restore_async(rc);
  return restore_async_holding(rc, give_back);
}

// The one frame in which lock code runs with the asynchronous type. It must
// have no cleanups (no objects with destructors, no catch): keep it so.
template <class Sleep>
__attribute__((noinline)) int async_sleep_frame(Sleep&& sleep) {
  int t;
  set_type(PTHREAD_CANCEL_ASYNCHRONOUS, &t);
  int rc = sleep();
  set_type(PTHREAD_CANCEL_DEFERRED, &t);
  return rc;
}

}  // namespace lockswap::cancel
