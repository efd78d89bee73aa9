// tests/torture/cancel_ops.cpp — deferred cancellation of lock waiters (registered with the driver, torture.cpp).
#include "torture.h"

namespace torture {

// ------------------------------------------------------------ deferred cancellation
//
// A victim runs random operations on the shared objects with cancellation
// disabled, and enables it only around the calls it is testing:
//   - cond waits and sem waits (cancellation points): the cleanup finds the
//     cond's mutex held again (its owner word free, an errorcheck unlock
//     returns 0), takes no token; a cancelled sem waiter takes no token (the
//     final value is exact);
//   - mutex and rwlock acquisitions (not cancellation points): the call must
//     complete; the cancellation then acts at pthread_testcancel with the lock
//     held, and the cleanup releases it.

enum CPhase { CP_NONE, CP_IN_LOCK, CP_MUTEX, CP_RD, CP_WR, CP_COND, CP_SEM };
void cancel_enable() { pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, nullptr); }
void cancel_disable() { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr); }

struct CancelCtx {
  int phase = CP_NONE;
  const char* what = "";
  MutexObj* m = nullptr;
  RwObj* rw = nullptr;
  CondObj* c = nullptr;
  SemObj* s = nullptr;
  bool untimed = false;
  uint64_t rv = 0;
  // Enters `p` with cancellation enabled (a cancellation there runs the
  // cleanup for `p`); disabled again on leaving it.
  void enter_cancellable(int p) {
    phase = p;
    cancel_enable();
  }
  void leave_cancellable() {
    cancel_disable();
    phase = CP_NONE;
  }
};

void cancel_cleanup(void* p) {
  auto* x = static_cast<CancelCtx*>(p);
  int rc = 0;
  switch (x->phase) {
    case CP_IN_LOCK:
      fail(CK_CANCEL, "%s acted on a deferred cancellation (a lock call is not a cancellation point)", x->what);
      break;
    case CP_MUTEX:
      leave(x->m->owner, t_me, "cancel cleanup", x->m->name);
      rc = mx_release(x->m->obj(), x->m->kind);
      if (rc != 0) fail(CK_CANCEL, "cleanup: unlocking %s returned %s", x->m->name, lstest::err_name(rc));
      break;
    case CP_RD:
      rd_leave(*x->rw, x->rv, "cancel cleanup");
      rc = pthread_rwlock_unlock(&x->rw->rw);
      if (rc != 0) fail(CK_CANCEL, "cleanup: unlocking (read) %s returned %s", x->rw->name, lstest::err_name(rc));
      break;
    case CP_WR:
      wr_leave(*x->rw, t_me, "cancel cleanup");
      rc = pthread_rwlock_unlock(&x->rw->rw);
      if (rc != 0) fail(CK_CANCEL, "cleanup: unlocking (write) %s returned %s", x->rw->name, lstest::err_name(rc));
      break;
    case CP_COND: {
      // POSIX: a cancelled condition waiter holds the mutex again when its
      // cleanup handlers run.
      CondObj& c = *x->c;
      enter(c.owner, t_me, "cleanup of a cancelled cond waiter", c.name);
      c.waiter_out(x->untimed);
      leave(c.owner, t_me, "cleanup of a cancelled cond waiter", c.name);
      rc = mx_release(c.mtx(), c.mkind);
      if (rc != 0)
        fail(CK_CANCEL, "cleanup of a waiter cancelled in %s: unlocking its mutex returned %s (not re-acquired?)", c.name,
             lstest::err_name(rc));
      break;
    }
    case CP_SEM:
      x->s->blocked.fetch_sub(1);
      break;
  }
  x->phase = CP_NONE;
}

struct VictimArg {
  TState* ts;
  uint64_t seed;
};


void* cancel_victim(void* p) {
  cancel_disable();
  auto* a = static_cast<VictimArg*>(p);
  adopt_state(a->ts);
  Rng r(a->seed);
  CancelCtx x;
  pthread_cleanup_push(cancel_cleanup, &x);
  for (;;) {
    x = CancelCtx{};
    uint32_t what = r.below(10);
    if (what < 3) {
      CondObj& c = r.chance(3) ? *pick(r, g_c11c) : *pick(r, g_cond);
      int form = c.c11 ? static_cast<int>(r.below(2)) : static_cast<int>(r.below(3));
      const bool timed = form != 0;
      const char* call = cv_form_name(c, form);
      set_op(call);
      cond_lock(c, call);
      c.waiter_in(!timed);
      x.c = &c;
      x.untimed = !timed;
      x.enter_cancellable(CP_COND);
      while (c.tokens == 0 && !g_stop.load()) {
        Deadline d;
        if (timed) d = make_deadline(r, c.c11 ? CLOCK_REALTIME : form == 1 ? c.clock : CLOCK_MONOTONIC, true);
        int rc = cv_wait_owned(c, form, d, call, timed);
        if (rc == ETIMEDOUT && timed) {
          if (!d.reached()) fail(CK_TIMEOUTS, "%s on %s returned ETIMEDOUT %.3f ms early", call, c.name, d.early_ms());
          break;
        }
        if (rc != 0) {
          fail(CK_ERRNO, "%s on %s returned %s", call, c.name, lstest::err_name(rc));
          break;
        }
      }
      x.leave_cancellable();
      c.take_token_if_any();
      c.waiter_out(!timed);
      cond_unlock(c, call);
    } else if (what < 5) {
      SemObj& s = g_native_sem ? *pick(r, g_sem) : *g_victim_sem;
      int form = static_cast<int>(r.below(3));
      Deadline d;
      if (form) d = make_deadline(r, form == 1 || r.chance(2) ? CLOCK_REALTIME : CLOCK_MONOTONIC, true);
      set_op(kSemForm[form]);
      s.blocked.fetch_add(1);
      x.s = &s;
      int rc;
      x.enter_cancellable(CP_SEM);
      {
        WaitScope ws(W_SEM, &s, kSemForm[form], form ? d.mono_limit() : 0);
        rc = sem_wait_form(s, form, d);
      }
      x.leave_cancellable();
      s.blocked.fetch_sub(1);
      if (rc == 0) s.consumed.fetch_add(1);
      else if (!(form && rc == ETIMEDOUT)) fail(CK_ERRNO, "%s on %s returned %s", kSemForm[form], s.name, lstest::err_name(rc));
    } else if (what < 7) {
      MutexObj& m = r.chance(4) ? *pick(r, g_c11m) : *pick(r, g_mutex);
      int how = mx_fix_how(m.kind, r.chance(3) ? H_CLOCK_MONO : H_LOCK);
      Deadline d;
      if (how_timed(how)) d = make_deadline(r, mk_c11(m.kind) ? CLOCK_REALTIME : CLOCK_MONOTONIC, true);
      const char* call = how == H_LOCK ? "mutex_lock (cancel pending?)" : "mutex_timedlock (cancel pending?)";
      set_op(call);
      x.m = &m;
      x.what = call;
      int rc;
      x.enter_cancellable(CP_IN_LOCK);
      {
        WaitScope ws(W_MUTEX, &m, call, how_timed(how) ? d.mono_limit() : 0);
        rc = mx_acquire(m.obj(), m.kind, how, d);
      }
      if (rc != 0) {
        x.leave_cancellable();
        check_not_acquired(call, m.name, how, rc, d);
      } else {
        enter(m.owner, t_me, call, m.name);
        m.counter++;
        m.shadow.fetch_add(1, std::memory_order_relaxed);
        x.phase = CP_MUTEX;
        pthread_testcancel();  // a pending cancellation acts here, with the mutex held
        x.leave_cancellable();
        leave(m.owner, t_me, call, m.name);
        rc = mx_release(m.obj(), m.kind);
        if (rc != 0) fail(CK_ERRNO, "unlock of %s returned %s", m.name, lstest::err_name(rc));
      }
    } else if (what < 9) {
      RwObj& o = *pick(r, g_rw);
      bool rd = r.chance(2);
      int how = r.chance(3) ? H_CLOCK_MONO : H_LOCK;
      Deadline d;
      if (how_timed(how)) d = make_deadline(r, CLOCK_MONOTONIC, true);
      const char* call = rd ? "rwlock_rdlock (cancel pending?)" : "rwlock_wrlock (cancel pending?)";
      set_op(call);
      x.rw = &o;
      x.what = call;
      int rc;
      x.enter_cancellable(CP_IN_LOCK);
      {
        WaitScope ws(W_RWLOCK, &o, call, how_timed(how) ? d.mono_limit() : 0, rd ? 1 : 0);
        rc = rw_acquire(&o.rw, rd, how, d);
      }
      if (rc != 0) {
        x.leave_cancellable();
        check_not_acquired(call, o.name, how, rc, d);
      } else {
        if (rd) {
          x.rv = rd_enter(o, call);
          x.phase = CP_RD;
        } else {
          wr_enter(o, t_me, call);
          x.phase = CP_WR;
        }
        pthread_testcancel();
        x.leave_cancellable();
        if (rd) rd_leave(o, x.rv, call);
        else wr_leave(o, t_me, call);
        rc = pthread_rwlock_unlock(&o.rw);
        if (rc != 0) fail(CK_ERRNO, "unlock of %s returned %s", o.name, lstest::err_name(rc));
      }
    } else {
      set_op("nanosleep");
      cancel_enable();
      sleep_ns(r.below(300'000));
      cancel_disable();
    }
    count_op(K_CANCEL);
    set_op("testcancel");
    cancel_enable();
    pthread_testcancel();
    cancel_disable();
  }
  pthread_cleanup_pop(0);
  return nullptr;
}

void op_cancel(Rng& r) {
  set_op("deferred cancel");
  auto* a = new VictimArg{alloc_state("cancel-victim", 0), r.next()};
  if (!a->ts) {
    delete a;
    return;
  }
  pthread_t t;
  int rc = pthread_create(&t, nullptr, cancel_victim, a);
  if (rc != 0) {
    note("pthread_create (cancel victim): %s", lstest::err_name(rc));
    release_state(a->ts);
    delete a;
    return;
  }
  uint32_t x = r.below(8);
  if (x == 1 || x == 2) sched_yield();
  else if (x > 2) sleep_ns(r.below(3'000'000));
  rc = pthread_cancel(t);
  if (rc != 0) fail(CK_CANCEL, "pthread_cancel returned %s", lstest::err_name(rc));
  void* res = nullptr;
  if (!bounded_join(t, &res, bound_ns(), "join a cancelled victim")) {
    fail(CK_CANCEL, "a deferred-cancelled victim (%s) was not cancelled within %.0f s; it was in %s", a->ts->name,
         g_opt.stall_s, a->ts->op.load());
    dump_states("deferred cancellation: the victim did not end");
    return;  // the victim and its slot are abandoned
  }
  if (res != PTHREAD_CANCELED) fail(CK_CANCEL, "a cancelled victim exited with %p, not PTHREAD_CANCELED", res);
  release_state(a->ts);
  delete a;
  g_cancelled.fetch_add(1, std::memory_order_relaxed);
}

const ClassRegistration kCancelOps(K_CANCEL, [](Rng& r, sem_t*) { op_cancel(r); });

}  // namespace torture
