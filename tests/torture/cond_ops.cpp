// tests/torture/cond_ops.cpp — condition variable operations (the token protocol) (registered with the driver, torture.cpp).
#include "torture.h"

namespace torture {

// ------------------------------------------------------------ cond ops

void cv_produce(Rng& r, CondObj& c) {
  set_op(c.c11 ? "cnd produce" : "cond produce");
  cond_lock(c, "produce");
  uint64_t k = r.chance(4) ? 1 + r.below(3) : 1;
  c.tokens += k;
  c.tokens_a.store(c.tokens);
  c.produced.fetch_add(k);
  bool all = k > 1 ? r.chance(2) : r.chance(6);
  bool inside = r.below(10) < 7;
  auto wake = [&] {
    if (g_opt.inject == "lost-signal" && r.chance(20)) return;
    for (uint64_t i = 0; i < (all ? 1 : k); ++i) {
      int rc = cv_wake(c, all);
      if (rc != 0) fail(CK_ERRNO, "%s of %s returned %s", all ? "broadcast" : "signal", c.name, lstest::err_name(rc));
    }
  };
  if (inside) wake();
  cs_delay(r);
  cond_unlock(c, "produce");
  if (!inside) wake();
}

void cv_consume(Rng& r, CondObj& c) {
  int form = r.below(5);
  form = form < 2 ? 0 : form < 4 ? 1 : 2;
  if (c.c11 && form == 2) form = 1;
  const bool timed = form != 0;
  const char* call = cv_form_name(c, form);
  set_op(call);
  cond_lock(c, call);
  c.waiter_in(!timed);
  int tries = 1 + static_cast<int>(r.below(3));
  while (c.tokens == 0 && !g_stop.load()) {
    Deadline d;
    if (timed) d = make_deadline(r, c.c11 ? CLOCK_REALTIME : form == 1 ? c.clock : (r.chance(2) ? CLOCK_MONOTONIC : CLOCK_REALTIME), true);
    int rc = cv_wait_owned(c, form, d, call, timed);
    if (rc == ETIMEDOUT && timed) {
      g_timeouts.fetch_add(1, std::memory_order_relaxed);
      if (!d.reached()) fail(CK_TIMEOUTS, "%s on %s returned ETIMEDOUT %.3f ms before its deadline", call, c.name, d.early_ms());
      if (--tries == 0) break;
      continue;
    }
    if (rc != 0) {
      fail(CK_ERRNO, "%s on %s returned %s", call, c.name, lstest::err_name(rc));
      break;
    }
  }
  c.take_token_if_any();
  c.waiter_out(!timed);
  cs_delay(r);
  cond_unlock(c, call);
}

void op_cond(Rng& r, CondObj& c) {
  if (r.chance(2)) cv_produce(r, c);
  else cv_consume(r, c);
  count_op(c.c11 ? K_C11 : K_COND);
}

const ClassRegistration kCondOps(K_COND, [](Rng& r, sem_t*) { op_cond(r, *pick(r, g_cond)); });

}  // namespace torture
