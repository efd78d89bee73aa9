// tests/torture/sem_ops.cpp — POSIX semaphore operations (registered with the driver, torture.cpp).
#include "torture.h"

namespace torture {

// ------------------------------------------------------------ sem ops

void sem_waiter(Rng& r, SemObj& s, int form) {
  Deadline d;
  if (form == 1) d = make_deadline(r, CLOCK_REALTIME, true);
  if (form == 2) d = make_deadline(r, r.chance(2) ? CLOCK_MONOTONIC : CLOCK_REALTIME, true);
  set_op(kSemForm[form]);
  s.blocked.fetch_add(1);
  int rc;
  {
    WaitScope ws(W_SEM, &s, kSemForm[form], form ? d.mono_limit() : 0);
    rc = sem_wait_form(s, form, d);
  }
  s.blocked.fetch_sub(1);
  if (rc == 0) {
    s.consumed.fetch_add(1);
  } else if (form != 0 && rc == ETIMEDOUT) {
    g_timeouts.fetch_add(1, std::memory_order_relaxed);
    if (!d.reached()) fail(CK_TIMEOUTS, "%s on %s returned ETIMEDOUT %.3f ms before its deadline", kSemForm[form], s.name, d.early_ms());
  } else {
    fail(CK_ERRNO, "%s on %s returned %s", kSemForm[form], s.name, lstest::err_name(rc));
  }
}

void op_sem(Rng& r, SemObj& s, sem_t* mine) {
  uint32_t x = r.below(40);
  if (x < 17) {
    set_op("sem_post");
    int rc = g_opt.inject == "lost-post" && r.chance(200) ? 0 : sem_rc(sem_post(&s.s));
    if (rc != 0) fail(CK_ERRNO, "sem_post on %s returned %s", s.name, lstest::err_name(rc));
    else s.posted.fetch_add(1);
  } else if (x < 22) {
    set_op("sem_trywait");
    int rc = sem_rc(sem_trywait(&s.s));
    if (rc == 0) s.consumed.fetch_add(1);
    else if (rc == EAGAIN) g_busy.fetch_add(1, std::memory_order_relaxed);
    else fail(CK_ERRNO, "sem_trywait on %s returned %s", s.name, lstest::err_name(rc));
  } else if (x < 27) {
    sem_waiter(r, s, 0);
  } else if (x < 32) {
    sem_waiter(r, s, 1);
  } else if (x < 37) {
    sem_waiter(r, s, 2);
  } else if (x < 38) {
    set_op("sem_getvalue");
    int v = sem_value(&s.s);
    if (v < 0) fail(CK_SEM, "sem_getvalue of %s gave %d", s.name, v);
    // A malformed deadline: EINVAL, whatever the value (checked first).
    if (r.chance(4)) {
      timespec bad{0, 1'000'000'000};
      int rc = sem_rc(sem_timedwait(&s.s, &bad));
      if (rc == 0) s.consumed.fetch_add(1);
      if (rc != EINVAL) fail(CK_ERRNO, "sem_timedwait on %s with tv_nsec=1e9 returned %s (expected EINVAL)", s.name, lstest::err_name(rc));
    }
  } else {
    // The thread's own semaphore: k posts, then k trywaits all succeed and
    // the value is back to 0 (a reserved token can be taken at once).
    set_op("own sem round");
    int k = 1 + static_cast<int>(r.below(4));
    for (int i = 0; i < k; ++i)
      if (sem_post(mine) != 0) fail(CK_ERRNO, "sem_post on the thread's own semaphore returned %s", lstest::err_name(errno));
    for (int i = 0; i < k; ++i) {
      int rc = r.chance(2) ? sem_rc(sem_trywait(mine)) : sem_rc(sem_clockwait(mine, CLOCK_MONOTONIC, &kEpoch));
      if (rc != 0) fail(CK_SEM, "token %d/%d posted to the thread's own semaphore could not be taken: %s", i + 1, k, lstest::err_name(rc));
    }
    int rc = sem_rc(sem_trywait(mine));
    if (rc != EAGAIN) fail(CK_SEM, "the thread's own semaphore is not empty after its round: trywait returned %s", lstest::err_name(rc));
  }
  count_op(K_SEM);
}

const ClassRegistration kSemOps(K_SEM, [](Rng& r, sem_t* mine) { op_sem(r, *pick(r, g_sem), mine); });

}  // namespace torture
