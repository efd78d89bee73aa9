// tests/torture/async_cancel_ops.cpp — asynchronous cancellation inside lock calls (registered with the driver, torture.cpp).
#include "torture.h"

namespace torture {

// ------------------------------------------------------------ asynchronous cancellation
//
// A victim (victims.c) blocks in one call on private objects that the
// canceller holds; the canceller cancels it asynchronously (at once, after a
// pause, or once it sleeps), joins it, checks that it was cancelled with its
// cleanup run, then that every object still works, and destroys and unmaps
// them. glibc's own rwlock is left unusable by such a cancellation, so under
// the glibc rwlock the rwlock is not checked (nor destroyed) afterwards.

struct AsyncPage {
  pthread_mutex_t m;
  pthread_rwlock_t rw;
  pthread_cond_t c;
  sem_t s;
};


// The owner field of a pthread_mutex_t (glibc's __data.__owner at offset 8,
// kept there by lockswap's ABI).
int mutex_owner_field(const pthread_mutex_t* m) {
  int owner;
  memcpy(&owner, reinterpret_cast<const char*>(m) + 8, sizeof owner);
  return owner;
}

// False when the objects must not be destroyed (a mutex left held).
bool async_usable(AsyncPage* P, int kind, bool posted, bool returned, const char* desc, bool skip_rw, int victim_tid) {
  const int64_t B = bound_ns();
  timespec far = mono_in(B);
  int rc;
  if (kind == AV_MUTEX_MAYBE && !returned) {
    // The mutex was released just before the cancellation, so the victim may
    // have been cancelled inside pthread_mutex_lock after taking the lock
    // word but before recording itself as owner (pthread_mutex_lock is not
    // async-cancel-safe; glibc has this window too): the mutex then stays
    // held by a dead thread whose cleanup could not release it. Recognised by
    // the owner field (0 or the victim's tid); any other stuck state fails.
    rc = pthread_mutex_trylock(&P->m);
    if (rc == 0) {
      pthread_mutex_unlock(&P->m);
    } else {
      int owner = mutex_owner_field(&P->m);
      if (rc == EBUSY && (owner == 0 || owner == victim_tid)) {
        g_async_window.fetch_add(1, std::memory_order_relaxed);
        note("%s: cancelled inside pthread_mutex_lock after acquiring (owner field %d): the mutex stays held by the "
             "dead victim, as under glibc; page abandoned", desc, owner);
        return false;
      }
      fail(CK_ASYNC, "%s: afterwards its mutex is busy (trylock %s, owner field %d, victim tid %d)", desc, lstest::err_name(rc),
           owner, victim_tid);
      return false;
    }
  }
  {
    WaitScope ws(W_BOUNDED, nullptr, "async: mutex usable?", mono() + B + B);
    rc = pthread_mutex_clocklock(&P->m, CLOCK_MONOTONIC, &far);
  }
  if (rc != 0) {
    fail(CK_ASYNC, "%s: afterwards its mutex cannot be locked: %s", desc, lstest::err_name(rc));
  } else {
    int rc2 = pthread_mutex_trylock(&P->m);
    if (rc2 == 0) pthread_mutex_unlock(&P->m);  // recursive
    else if (rc2 != EBUSY && rc2 != EDEADLK) fail(CK_ASYNC, "%s: trylock of its held mutex returned %s", desc, lstest::err_name(rc2));
    // The condvar: signal, broadcast, an expired wait.
    if ((rc2 = pthread_cond_signal(&P->c)) != 0) fail(CK_ASYNC, "%s: cond_signal afterwards: %s", desc, lstest::err_name(rc2));
    if ((rc2 = pthread_cond_broadcast(&P->c)) != 0) fail(CK_ASYNC, "%s: cond_broadcast afterwards: %s", desc, lstest::err_name(rc2));
    if (kind == AV_COND) {
      rc2 = pthread_cond_clockwait(&P->c, &P->m, CLOCK_MONOTONIC, &kEpoch);
      if (rc2 != ETIMEDOUT) fail(CK_ASYNC, "%s: an expired cond_clockwait afterwards returned %s", desc, lstest::err_name(rc2));
    }
    if ((rc2 = pthread_mutex_unlock(&P->m)) != 0) fail(CK_ASYNC, "%s: mutex_unlock afterwards: %s", desc, lstest::err_name(rc2));
  }
  if (!skip_rw) {
    far = mono_in(B);
    {
      WaitScope ws(W_BOUNDED, nullptr, "async: rwlock usable?", mono() + B + B);
      rc = pthread_rwlock_clockwrlock(&P->rw, CLOCK_MONOTONIC, &far);
    }
    if (rc != 0) {
      fail(CK_ASYNC, "%s: afterwards its rwlock cannot be write-locked: %s", desc, lstest::err_name(rc));
    } else {
      pthread_rwlock_unlock(&P->rw);
      rc = pthread_rwlock_clockrdlock(&P->rw, CLOCK_MONOTONIC, &far);
      if (rc != 0) {
        fail(CK_ASYNC, "%s: afterwards its rwlock cannot be read-locked: %s", desc, lstest::err_name(rc));
      } else {
        int rc2 = pthread_rwlock_tryrdlock(&P->rw);
        if (rc2 != 0) fail(CK_ASYNC, "%s: a second read lock afterwards: %s", desc, lstest::err_name(rc2));
        else pthread_rwlock_unlock(&P->rw);
        rc2 = pthread_rwlock_trywrlock(&P->rw);
        if (rc2 != EBUSY) fail(CK_ASYNC, "%s: trywrlock of a read-held rwlock afterwards: %s", desc, lstest::err_name(rc2));
        if (rc2 == 0) pthread_rwlock_unlock(&P->rw);
        pthread_rwlock_unlock(&P->rw);
      }
    }
  }
  int v = sem_value(&P->s);
  if (kind == AV_SEM && posted) {
    if (v < 0 || v > 1 || (returned && v != 0))
      fail(CK_ASYNC, "%s: one token posted before the cancellation, the victim %s, value now %d", desc,
           returned ? "took it" : "did not return", v);
    if (v == 1 && sem_trywait(&P->s) != 0) fail(CK_ASYNC, "%s: the token left cannot be taken: %s", desc, lstest::err_name(errno));
  } else if (v != 0) {
    fail(CK_ASYNC, "%s: the semaphore's value is %d afterwards (expected 0)", desc, v);
  }
  if (sem_post(&P->s) != 0) fail(CK_ASYNC, "%s: sem_post afterwards: %s", desc, lstest::err_name(errno));
  if (sem_trywait(&P->s) != 0) fail(CK_ASYNC, "%s: sem_trywait of the token just posted: %s", desc, lstest::err_name(errno));
  rc = sem_rc(sem_clockwait(&P->s, CLOCK_MONOTONIC, &kEpoch));
  if (rc != ETIMEDOUT) fail(CK_ASYNC, "%s: an expired sem_clockwait afterwards returned %s", desc, lstest::err_name(rc));
  return true;
}

void op_async(Rng& r) {
  set_op("async cancel");
  const int kind = static_cast<int>(r.below(AV_KINDS));
  const bool is_rw = kind == AV_RDLOCK || kind == AV_WRLOCK;
  const bool skip_rw = !g_native_rwlock;
  auto* P = static_cast<AsyncPage*>(map_page());
  if (!P) {
    note("mmap failed: %s", lstest::err_name(errno));
    return;
  }
  static const int kTypes[] = {PTHREAD_MUTEX_DEFAULT, PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ERRORCHECK,
                               PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ADAPTIVE_NP};
  static const char* const kTypeName[] = {"default", "normal", "errorcheck", "recursive", "adaptive"};
  int ti = (kind == AV_COND || kind == AV_MUTEX_MAYBE) ? 2 : static_cast<int>(r.below(5));
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_settype(&ma, kTypes[ti]);
  must(pthread_mutex_init(&P->m, &ma), "async mutex");
  pthread_mutexattr_destroy(&ma);
  int rk = r.chance(2) ? RK_DEFAULT : RK_WRITER_NONREC;
  must(rw_init(&P->rw, rk), "async rwlock");
  must(pthread_cond_init(&P->c, nullptr), "async cond");
  must(sem_rc(sem_init(&P->s, 0, 0)), "async sem");
  auto* a = new av_arg{};
  a->kind = kind;
  a->timed = r.chance(2);
  a->m = &P->m;
  a->rw = &P->rw;
  a->c = &P->c;
  a->s = &P->s;
  a->far_rt = to_ts(now_ns(CLOCK_REALTIME) + 60'000'000'000);
  a->far_mono = to_ts(mono() + 60'000'000'000);
  a->warmup = r.chance(2);
  int mode = static_cast<int>(r.below(3));  // 0 at once, 1 after a short pause, 2 once it sleeps
  if (kind == AV_COND && !g_native_mutex) mode = 2;  // glibc's cond wait is async-cancel-safe only asleep
  int hold_mode = 0;                                  // AV_WRLOCK: 1 read-held, 2 write-held
  int rc = 0;
  bool held_m = false;
  int held_rw = 0;
  switch (kind) {
    case AV_MUTEX:
    case AV_MUTEX_TIMED:
    case AV_MUTEX_SPIN:
    case AV_MUTEX_MAYBE:
      rc = pthread_mutex_lock(&P->m);
      held_m = rc == 0;
      break;
    case AV_RDLOCK:
      rc = pthread_rwlock_wrlock(&P->rw);
      held_rw = rc == 0 ? 2 : 0;
      break;
    case AV_WRLOCK:
      hold_mode = r.chance(2) ? 1 : 2;
      rc = hold_mode == 1 ? pthread_rwlock_rdlock(&P->rw) : pthread_rwlock_wrlock(&P->rw);
      held_rw = rc == 0 ? hold_mode : 0;
      break;
  }
  char desc[200];
  snprintf(desc, sizeof desc, "async cancel in %s%s (mutex %s, rwlock %s%s, %s, warm-up %d)", av_kind_name(kind),
           a->timed ? " [timed]" : "", kTypeName[ti], kRKindName[rk],
           kind == AV_WRLOCK ? (hold_mode == 1 ? " read-held" : " write-held") : "",
           mode == 0 ? "cancelled at once" : mode == 1 ? "after a pause" : "once asleep", a->warmup);
  if (rc != 0) fail(CK_ERRNO, "%s: the canceller could not take its private object: %s", desc, lstest::err_name(rc));
  pthread_t t;
  rc = pthread_create(&t, nullptr, av_victim, a);
  if (rc != 0) {
    note("pthread_create (async victim): %s", lstest::err_name(rc));
    if (held_m) pthread_mutex_unlock(&P->m);
    if (held_rw) pthread_rwlock_unlock(&P->rw);
    munmap(P, 4096);
    delete a;
    return;
  }
  const int64_t B = bound_ns();
  bool unlock_after_cancel = false;
  if (!wait_flag(&a->started, B)) fail(CK_ASYNC, "%s: the victim did not start", desc);
  if (kind == AV_COND) {
    if (!wait_flag(&a->waiting, B)) fail(CK_ASYNC, "%s: the victim did not reach its wait", desc);
    {
      timespec far = mono_in(B);
      WaitScope ws(W_BOUNDED, nullptr, "async: lock the cond's mutex", mono() + B + B);
      rc = pthread_mutex_clocklock(&P->m, CLOCK_MONOTONIC, &far);  // free once the victim waits
    }
    if (rc != 0)
      fail(CK_ASYNC, "%s: the mutex the victim waits with cannot be locked: %s (victim: returned=%d rc=%s)", desc,
           lstest::err_name(rc), __atomic_load_n(&a->returned, __ATOMIC_SEQ_CST), lstest::err_name(__atomic_load_n(&a->rc, __ATOMIC_SEQ_CST)));
    held_m = rc == 0;
    if (held_m && r.chance(2)) {
      pthread_mutex_unlock(&P->m);
      held_m = false;
    } else {
      unlock_after_cancel = held_m;
    }
  }
  set_op(av_kind_name(kind));  // (a static string: desc lives on this stack)
  if (kind == AV_MUTEX_SPIN) {
    int64_t end = mono() + r.below(2'000'000);  // the holder runs: spinners spin
    while (mono() < end) cpu_relax();
  } else if (mode == 1) {
    if (r.chance(2)) sched_yield();
    else spin(r.below(50'000));
  } else if (mode == 2) {
    int64_t end = mono() + B;
    while (__atomic_load_n(&a->tid, __ATOMIC_SEQ_CST) == 0 && mono() < end) sched_yield();
    wait_sleeping(__atomic_load_n(&a->tid, __ATOMIC_SEQ_CST), 2'000'000'000);
  }
  if (kind == AV_MUTEX_MAYBE && held_m) {
    pthread_mutex_unlock(&P->m);
    held_m = false;
  }
  bool posted = false;
  if (kind == AV_SEM && r.chance(3)) posted = sem_post(&P->s) == 0;
  rc = pthread_cancel(t);
  if (rc != 0) fail(CK_ASYNC, "%s: pthread_cancel returned %s", desc, lstest::err_name(rc));
  if (unlock_after_cancel) {
    sleep_ns(r.below(1'000'000));
    pthread_mutex_unlock(&P->m);
    held_m = false;
  }
  void* res = nullptr;
  if (!bounded_join(t, &res, B, "join an async-cancelled victim")) {
    fail(CK_ASYNC, "%s: the victim was not cancelled within %.0f s (started=%d returned=%d cleanup=%d)", desc, g_opt.stall_s,
         __atomic_load_n(&a->started, __ATOMIC_SEQ_CST), __atomic_load_n(&a->returned, __ATOMIC_SEQ_CST),
         __atomic_load_n(&a->cleanup_ran, __ATOMIC_SEQ_CST));
    dump_states("asynchronous cancellation: the victim did not end");
    return;  // abandoned: the victim may be stuck in the objects
  }
  const int ran = a->cleanup_ran, ret = a->returned, arc = a->rc, crc = a->cleanup_rc;
  if (res != PTHREAD_CANCELED)
    fail(CK_ASYNC, "%s: the victim exited with %p, not PTHREAD_CANCELED (returned=%d rc=%s)", desc, res, ret, lstest::err_name(arc));
  if (!ran) fail(CK_ASYNC, "%s: the cleanup handler did not run", desc);
  const bool may_return = kind == AV_MUTEX_MAYBE || (kind == AV_SEM && posted);
  if (ret && !may_return)
    fail(CK_ASYNC, "%s: the blocking call returned %s although its object was never released", desc, lstest::err_name(arc));
  if (ret && arc != 0) fail(CK_ASYNC, "%s: the blocking call returned %s", desc, lstest::err_name(arc));
  if (kind == AV_COND && crc != 0)
    fail(CK_ASYNC, "%s: in the cleanup handler, unlocking the errorcheck mutex returned %s (not re-acquired)", desc,
         lstest::err_name(crc));
  if (kind == AV_MUTEX_MAYBE && crc != 0 && (crc != EPERM || ret))
    fail(CK_ASYNC, "%s: in the cleanup handler, unlocking the mutex returned %s (victim %s)", desc, lstest::err_name(crc),
         ret ? "returned from the lock" : "did not return");
  if (held_m && (rc = pthread_mutex_unlock(&P->m)) != 0) fail(CK_ASYNC, "%s: the canceller's unlock: %s", desc, lstest::err_name(rc));
  if (held_rw) {
    rc = pthread_rwlock_unlock(&P->rw);
    if (rc != 0 && !(is_rw && skip_rw)) fail(CK_ASYNC, "%s: the canceller's rwlock unlock: %s", desc, lstest::err_name(rc));
  }
  const bool rw_unchecked = is_rw && skip_rw;
  if (rw_unchecked) note("%s: glibc's rwlock is left unusable by this cancellation; not checked", desc);
  if (!async_usable(P, kind, posted, ret, desc, skip_rw && is_rw, __atomic_load_n(&a->tid, __ATOMIC_SEQ_CST))) {
    delete a;
    count_op(K_ASYNC);
    return;  // the page is abandoned: a mutex in it stays held
  }
  if (!rw_unchecked && (rc = pthread_rwlock_destroy(&P->rw)) != 0) fail(CK_ASYNC, "%s: rwlock_destroy: %s", desc, lstest::err_name(rc));
  {
    WaitScope ws(W_BOUNDED, nullptr, "async: destroy", mono() + B);
    if ((rc = pthread_cond_destroy(&P->c)) != 0) fail(CK_ASYNC, "%s: cond_destroy: %s", desc, lstest::err_name(rc));
    if ((rc = pthread_mutex_destroy(&P->m)) != 0) fail(CK_ASYNC, "%s: mutex_destroy: %s", desc, lstest::err_name(rc));
    if (sem_destroy(&P->s) != 0) fail(CK_ASYNC, "%s: sem_destroy: %s", desc, lstest::err_name(errno));
  }
  munmap(P, 4096);
  delete a;
  if (g_opt.verbose && g_async_done.load() < 16) note("%s: ok", desc);
  g_async_done.fetch_add(1, std::memory_order_relaxed);
  count_op(K_ASYNC);
}

const ClassRegistration kAsyncOps(K_ASYNC, [](Rng& r, sem_t*) { op_async(r); });

}  // namespace torture
