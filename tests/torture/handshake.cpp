// tests/torture/handshake.cpp — the handshake pairs (cond, C11 cnd, sem), on threads of their own (registered with the driver, torture.cpp).
#include "torture.h"

namespace torture {

// ------------------------------------------------------------ handshakes

int hs_lock(HsPair& h) { return h.type == HS_C11 ? c11rc(mtx_lock(&h.cm)) : pthread_mutex_lock(&h.m); }
int hs_unlock(HsPair& h) { return h.type == HS_C11 ? c11rc(mtx_unlock(&h.cm)) : pthread_mutex_unlock(&h.m); }
int hs_wake(HsPair& h, bool all) {
  if (h.type == HS_C11) return c11rc(all ? cnd_broadcast(&h.cc) : cnd_signal(&h.cc));
  return all ? pthread_cond_broadcast(&h.c) : pthread_cond_signal(&h.c);
}

void* hs_thread(void* p) {
  auto* a = static_cast<HsArg*>(p);
  adopt_state(a->ts);
  Rng r(a->seed);
  HsPair& h = *a->h;
  const int me = a->side;
  const char* name = kHsName[h.type];
  while (!g_go.load()) sched_yield();
  while (!g_stop.load()) {
    if (h.type == HS_SEM) {
      int form = static_cast<int>(r.below(3));
      Deadline d;
      if (form) d = make_deadline(r, form == 1 ? CLOCK_REALTIME : CLOCK_MONOTONIC, true);
      set_op("handshake sem wait");
      int rc;
      {
        WaitScope ws(W_HS, &h, kSemForm[form], form ? d.mono_limit() : 0, me);
        rc = form == 0 ? sem_rc(sem_wait(&h.s[me]))
             : form == 1 ? sem_rc(sem_timedwait(&h.s[me], &d.ts))
                         : sem_rc(sem_clockwait(&h.s[me], d.clk, &d.ts));
      }
      if (rc == ETIMEDOUT && form) {
        if (!d.reached()) fail(CK_TIMEOUTS, "%s: %s returned ETIMEDOUT %.3f ms early", name, kSemForm[form], d.early_ms());
        continue;
      }
      if (rc != 0) {
        fail(CK_ERRNO, "%s: %s returned %s", name, kSemForm[form], lstest::err_name(rc));
        break;
      }
      if (g_stop.load()) break;
      h.rounds[me].fetch_add(1);
      h.turn_a.store(1 - me);
      if (sem_post(&h.s[1 - me]) != 0) fail(CK_ERRNO, "%s: sem_post: %s", name, lstest::err_name(errno));
    } else {
      set_op("handshake lock");
      int rc;
      {
        WaitScope ws(W_BOUNDED, nullptr, "handshake mutex", mono() + 2 * bound_ns());
        rc = hs_lock(h);
      }
      if (rc != 0) {
        fail(CK_ERRNO, "%s: lock: %s", name, lstest::err_name(rc));
        break;
      }
      enter(h.owner, t_me, name, name);
      bool timed = r.chance(2);
      set_op("handshake wait");
      while (h.turn != me && !g_stop.load()) {
        Deadline d;
        if (timed) d = make_deadline(r, h.type == HS_C11 ? CLOCK_REALTIME : CLOCK_MONOTONIC, true);
        leave(h.owner, t_me, name, name);
        {
          WaitScope ws(W_HS, &h, h.type == HS_C11 ? "cnd_wait" : "cond_wait", timed ? d.mono_limit() : 0, me);
          if (h.type == HS_C11) rc = c11rc(timed ? cnd_timedwait(&h.cc, &h.cm, &d.ts) : cnd_wait(&h.cc, &h.cm));
          else rc = timed ? pthread_cond_timedwait(&h.c, &h.m, &d.ts) : pthread_cond_wait(&h.c, &h.m);
        }
        enter(h.owner, t_me, name, name);
        if (rc == ETIMEDOUT && timed) {
          if (!d.reached()) fail(CK_TIMEOUTS, "%s: timed wait returned ETIMEDOUT %.3f ms early", name, d.early_ms());
          continue;
        }
        if (rc != 0) {
          fail(CK_ERRNO, "%s: wait returned %s", name, lstest::err_name(rc));
          break;
        }
      }
      if (!g_stop.load() && h.turn == me) {
        h.turn = 1 - me;
        h.turn_a.store(h.turn);
        h.rounds[me].fetch_add(1);
        rc = g_opt.inject == "lost-signal" && r.chance(5000) ? 0 : hs_wake(h, r.chance(4));
        if (rc != 0) fail(CK_ERRNO, "%s: signal: %s", name, lstest::err_name(rc));
      }
      leave(h.owner, t_me, name, name);
      if ((rc = hs_unlock(h)) != 0) fail(CK_ERRNO, "%s: unlock: %s", name, lstest::err_name(rc));
    }
    count_op(K_HANDSHAKE);
    if (r.chance(2)) sleep_ns(r.below(100'000));  // leave the CPUs to the workers
  }
  set_op("done");
  return nullptr;
}

}  // namespace torture
