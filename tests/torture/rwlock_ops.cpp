// tests/torture/rwlock_ops.cpp — rwlock operations (registered with the driver, torture.cpp).
#include "torture.h"

namespace torture {

// ------------------------------------------------------------ rwlock ops

void op_rwlock(Rng& r, RwObj& o) {
  const int me = t_me;
  bool rd = r.below(5) < 3;
  int how = pick_how(r);
  Deadline d;
  if (how_timed(how)) d = make_deadline(r, deadline_clock(how));
  const char* call = rd ? kRdHow[how] : kWrHow[how];
  set_op(call);
  int rc;
  if (how == H_TRY) {
    rc = rw_acquire(&o.rw, rd, how, d);
  } else {
    WaitScope ws(W_RWLOCK, &o, call, how_timed(how) ? d.mono_limit() : 0, rd ? 1 : 0);
    rc = rw_acquire(&o.rw, rd, how, d);
  }
  if (rc != 0) {
    check_not_acquired(call, o.name, how, rc, d);
    count_op(K_RWLOCK);
    return;
  }
  if (rd) {
    uint64_t v = rd_enter(o, call);
    int extra = 0;
    if (rk_default(o.kind) && r.chance(4)) {
      // A recursive read: the default kind lets it in whatever writers wait.
      int h = pick_how(r);
      Deadline d2;
      if (how_timed(h)) d2 = make_deadline(r, deadline_clock(h));
      set_op("recursive rdlock");
      int rc2;
      {
        WaitScope ws(W_RWLOCK, &o, "recursive rdlock", how_timed(h) ? d2.mono_limit() : 0, 2);
        rc2 = rw_acquire(&o.rw, true, h, d2);
      }
      if (rc2 == 0) {
        extra = 1;
      } else if ((h == H_TRY && rc2 == EBUSY) || (how_timed(h) && rc2 == ETIMEDOUT)) {
        // Not glibc's answer (its default rwlock lets a reader in while any
        // reader holds it), but a variant with writer fairness may refuse a
        // try or time out; counted, not failed.
        g_rec_busy.fetch_add(1, std::memory_order_relaxed);
        if (rc2 == ETIMEDOUT && !d2.reached())
          fail(CK_TIMEOUTS, "recursive %s on %s returned ETIMEDOUT %.3f ms early", kRdHow[h], o.name, d2.early_ms());
      } else {
        fail(CK_ERRNO, "recursive %s on %s (read-held by this thread) returned %s", kRdHow[h], o.name, lstest::err_name(rc2));
      }
    }
    cs_delay(r);
    rd_leave(o, v, call);
    for (int i = 0; i <= extra; ++i) {
      int rc2 = pthread_rwlock_unlock(&o.rw);
      if (rc2 != 0) fail(CK_ERRNO, "rwlock_unlock (read) of %s returned %s", o.name, lstest::err_name(rc2));
    }
  } else {
    wr_enter(o, me, call);
    cs_delay(r);
    wr_leave(o, me, call);
    int rc2 = pthread_rwlock_unlock(&o.rw);
    if (rc2 != 0) fail(CK_ERRNO, "rwlock_unlock (write) of %s returned %s", o.name, lstest::err_name(rc2));
  }
  count_op(K_RWLOCK);
}

const ClassRegistration kRwlockOps(K_RWLOCK, [](Rng& r, sem_t*) { op_rwlock(r, *pick(r, g_rw)); });

}  // namespace torture
