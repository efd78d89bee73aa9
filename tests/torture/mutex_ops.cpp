// tests/torture/mutex_ops.cpp — pthread mutex operations of every kind (registered with the driver, torture.cpp).
#include "torture.h"

namespace torture {

// ------------------------------------------------------------ mutex ops

void op_mutex(Rng& r, MutexObj& o) {
  const int me = t_me;
  const int cls = mk_c11(o.kind) ? K_C11 : K_MUTEX;
  // Unlocking an errorcheck mutex one does not own: EPERM (held by another
  // thread or free alike).
  if (mk_errorcheck(o.kind) && r.chance(24)) {
    set_op("mutex_unlock(not owner)");
    int rc = pthread_mutex_unlock(&o.pm);
    if (rc != EPERM)
      fail(CK_ERRNO, "pthread_mutex_unlock of %s by a non-owner returned %s (expected EPERM)", o.name, lstest::err_name(rc));
    count_op(cls);
    return;
  }
  int how = mx_fix_how(o.kind, pick_how(r));
  Deadline d;
  if (how_timed(how)) d = make_deadline(r, mk_c11(o.kind) ? CLOCK_REALTIME : deadline_clock(how));
  const char* call = mk_c11(o.kind) ? (how == H_TRY ? "mtx_trylock" : how == H_TIMED ? "mtx_timedlock" : "mtx_lock")
                                    : kMutexHow[how];
  set_op(call);
  int rc;
  const bool fake = g_opt.inject == "no-lock" && !mk_errorcheck(o.kind) && r.chance(50);
  if (fake) {
    rc = 0;  // pretend to hold it
  } else if (how == H_TRY) {
    rc = mx_acquire(o.obj(), o.kind, how, d);
  } else {
    WaitScope ws(W_MUTEX, &o, call, how_timed(how) ? d.mono_limit() : 0);
    rc = mx_acquire(o.obj(), o.kind, how, d);
  }
  if (rc != 0) {
    check_not_acquired(call, o.name, how, rc, d);
    count_op(cls);
    return;
  }
  enter(o.owner, me, call, o.name);
  if (o.counter != o.shadow.load(std::memory_order_relaxed))
    fail(CK_COUNTERS, "%s: counter of %s is %llu, its shadow %llu", call, o.name, (unsigned long long)o.counter,
         (unsigned long long)o.shadow.load());
  o.counter++;
  o.shadow.fetch_add(1, std::memory_order_relaxed);
  int depth = 1;
  if (mk_recursive(o.kind) && !fake) {
    for (uint32_t i = r.below(3); i > 0; --i) {
      int h = mx_fix_how(o.kind, pick_how(r));
      Deadline d2;
      if (how_timed(h)) d2 = make_deadline(r, mk_c11(o.kind) ? CLOCK_REALTIME : deadline_clock(h));
      int rc2 = mx_acquire(o.obj(), o.kind, h, d2);
      if (rc2 == 0) depth++;
      else fail(CK_ERRNO, "recursive re-lock (%s) of %s, held by this thread, returned %s", kMutexHow[h], o.name, lstest::err_name(rc2));
    }
  } else if (fake) {
  } else if (mk_errorcheck(o.kind) && r.chance(8)) {
    int h = r.below(3) == 0 ? H_TRY : r.chance(2) ? H_LOCK : H_CLOCK_MONO;
    Deadline d2 = make_deadline(r, CLOCK_MONOTONIC);
    int rc2 = mx_acquire(o.obj(), o.kind, h, d2);
    int want = h == H_TRY ? EBUSY : EDEADLK;
    if (rc2 != want)
      fail(CK_ERRNO, "%s of errorcheck %s by its owner returned %s (expected %s)", kMutexHow[h], o.name, lstest::err_name(rc2),
           lstest::err_name(want));
    if (rc2 == 0) depth++;
  }
  cs_delay(r);
  leave(o.owner, me, call, o.name);
  for (int i = 0; i < (fake ? 0 : depth); ++i) {
    int rc2 = mx_release(o.obj(), o.kind);
    if (rc2 != 0) fail(CK_ERRNO, "unlock %d/%d of %s returned %s", i + 1, depth, o.name, lstest::err_name(rc2));
  }
  count_op(cls);
}

const ClassRegistration kMutexOps(K_MUTEX, [](Rng& r, sem_t*) { op_mutex(r, *pick(r, g_mutex)); });

}  // namespace torture
