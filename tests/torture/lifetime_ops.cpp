// tests/torture/lifetime_ops.cpp — destroy and unmap by the last user (registered with the driver, torture.cpp).
#include "torture.h"

namespace torture {

// ------------------------------------------------------------ destroy and unmap
//
// A page of its own holds the objects; helper threads use them; the last
// user releases its lock (or returns from its wait) and destroys the objects
// and unmaps the page at once, while the others may still be inside their
// unlock, post or broadcast calls. A late access to the page is a SIGSEGV
// (reported by the fatal-signal handler with the seed).

enum { L_MUTEX, L_COND, L_SEM, L_RWLOCK, L_KINDS };
const char* const kLifeName[L_KINDS] = {"mutex", "cond", "sem", "rwlock"};

struct LifePage {
  pthread_mutex_t m;
  pthread_rwlock_t rw;
  pthread_cond_t c;
  sem_t s;
  clockid_t cclock;
  int users;  // protected by m (L_MUTEX, L_COND)
  int flag;   // L_COND predicate, protected by m
  uint64_t counter, expected;
  std::atomic<int> users_a;  // L_SEM waiters left
  std::atomic<int> arrived;  // L_COND waiters inside the wait
  std::atomic<int> done;     // L_RWLOCK readers/writers finished
};
struct LifeArg {
  int type = 0, role = 0, nw = 0;
  LifePage* P = nullptr;
  uint64_t seed = 0;
  TState* ts = nullptr;
};

void life_destroy(LifePage* P, int type) {
  int rc = 0;
  switch (type) {
    case L_MUTEX: rc = pthread_mutex_destroy(&P->m); break;
    case L_COND:
      rc = pthread_cond_destroy(&P->c);
      if (rc == 0) rc = pthread_mutex_destroy(&P->m);
      break;
    case L_SEM: rc = sem_destroy(&P->s) == 0 ? 0 : errno; break;
    case L_RWLOCK: rc = pthread_rwlock_destroy(&P->rw); break;
  }
  if (rc != 0) fail(CK_LIFETIME, "the last user's destroy of the %s returned %s", kLifeName[type], lstest::err_name(rc));
  if (munmap(P, 4096) != 0) fail(CK_LIFETIME, "munmap: %s", lstest::err_name(errno));
}

int life_mutex_lock(Rng& r, LifePage* P, const char* what) {
  const int64_t B = bound_ns();
  WaitScope ws(W_BOUNDED, nullptr, what, mono() + B);
  switch (r.below(3)) {
    case 0: return pthread_mutex_lock(&P->m);
    case 1: {
      timespec far = mono_in(B);
      return pthread_mutex_clocklock(&P->m, CLOCK_MONOTONIC, &far);
    }
    default: {
      int rc;
      while ((rc = pthread_mutex_trylock(&P->m)) == EBUSY) sched_yield();
      return rc;
    }
  }
}
int life_rw_lock(Rng& r, LifePage* P, bool rd, const char* what) {
  const int64_t B = bound_ns();
  WaitScope ws(W_BOUNDED, nullptr, what, mono() + B);
  int how = static_cast<int>(r.below(3));
  if (how == 2) {
    int rc;
    while ((rc = rd ? pthread_rwlock_tryrdlock(&P->rw) : pthread_rwlock_trywrlock(&P->rw)) == EBUSY) sched_yield();
    return rc;
  }
  Deadline d = far_deadline(CLOCK_MONOTONIC, B / 1'000'000);
  return rw_acquire(&P->rw, rd, how == 0 ? H_LOCK : H_CLOCK_MONO, d);
}
bool life_poll(const std::atomic<int>& v, int want, const char* what) {
  const int64_t B = bound_ns();
  WaitScope ws(W_BOUNDED, nullptr, what, mono() + B);
  int64_t end = mono() + B;
  while (v.load() < want) {
    if (mono() > end) return false;
    sched_yield();
  }
  return true;
}

void* life_helper(void* p) {
  auto* a = static_cast<LifeArg*>(p);
  TState* saved_ts = t_ts;
  int saved_me = t_me;
  adopt_state(a->ts);
  Rng r(a->seed);
  LifePage* P = a->P;
  const int64_t B = bound_ns();
  int rc = 0;
  auto chk = [&](int rc2, const char* what) {
    if (rc2 != 0) fail(CK_LIFETIME, "%s (%s page): %s", what, kLifeName[a->type], lstest::err_name(rc2));
    return rc2 == 0;
  };
  // Gives the page's mutex back and leaves the page: the last user destroys it.
  auto unlock_and_leave = [&](int kind) {
    bool last = --P->users == 0;
    chk(pthread_mutex_unlock(&P->m), "mutex unlock");
    if (last) life_destroy(P, kind);
  };
  switch (a->type) {
    case L_MUTEX: {
      set_op("lifetime mutex");
      uint64_t k = 1 + r.below(8);
      for (uint64_t i = 0; i < k; ++i) {
        if (!chk(life_mutex_lock(r, P, "lifetime mutex_lock"), "mutex lock")) break;
        P->counter++;
        if (r.chance(4)) sched_yield();
        chk(pthread_mutex_unlock(&P->m), "mutex unlock");
      }
      if (!chk(life_mutex_lock(r, P, "lifetime final mutex_lock"), "final mutex lock")) break;
      P->expected += k;
      bool last = --P->users == 0;
      if (last && P->counter != P->expected)
        fail(CK_LIFETIME, "mutex page: counter %llu, expected %llu", (unsigned long long)P->counter,
             (unsigned long long)P->expected);
      chk(pthread_mutex_unlock(&P->m), "final mutex unlock");
      if (last) life_destroy(P, L_MUTEX);
      break;
    }
    case L_COND: {
      set_op(a->role ? "lifetime cond signaller" : "lifetime cond waiter");
      if (a->role == 0) {
        if (!chk(life_mutex_lock(r, P, "lifetime cond: mutex_lock"), "mutex lock")) break;
        P->arrived.fetch_add(1);
        bool timed = r.chance(2);
        while (!P->flag) {
          WaitScope ws(W_BOUNDED, nullptr, "lifetime cond wait", mono() + B);
          if (timed) {
            timespec far = to_ts(now_ns(P->cclock) + B);
            rc = pthread_cond_timedwait(&P->c, &P->m, &far);
          } else {
            rc = pthread_cond_wait(&P->c, &P->m);
          }
          if (rc != 0) {
            chk(rc, timed ? "cond_timedwait" : "cond_wait");
            break;
          }
        }
        unlock_and_leave(L_COND);
      } else {
        if (!life_poll(P->arrived, a->nw, "lifetime cond: waiting for the waiters"))
          fail(CK_LIFETIME, "cond page: the waiters did not all reach their wait");
        if (!chk(life_mutex_lock(r, P, "lifetime cond: signaller mutex_lock"), "mutex lock")) break;
        P->flag = 1;
        if (r.chance(2)) {
          chk(pthread_cond_broadcast(&P->c), "cond_broadcast");
        } else {
          for (int i = 0; i < a->nw; ++i) chk(pthread_cond_signal(&P->c), "cond_signal");
        }
        unlock_and_leave(L_COND);
      }
      break;
    }
    case L_SEM: {
      set_op(a->role ? "lifetime sem poster" : "lifetime sem waiter");
      if (a->role == 0) {
        int form = static_cast<int>(r.below(3));
        {
          WaitScope ws(W_BOUNDED, nullptr, "lifetime sem wait", mono() + B);
          if (form == 0) rc = sem_rc(sem_wait(&P->s));
          else if (form == 1) {
            timespec far = to_ts(now_ns(CLOCK_REALTIME) + B);
            rc = sem_rc(sem_timedwait(&P->s, &far));
          } else {
            timespec far = mono_in(B);
            rc = sem_rc(sem_clockwait(&P->s, CLOCK_MONOTONIC, &far));
          }
        }
        chk(rc, kSemForm[form]);
        // Returned from the wait: the last waiter destroys at once, while the
        // poster may still be inside its sem_post (glibc allows this).
        if (P->users_a.fetch_sub(1) == 1) life_destroy(P, L_SEM);
      } else {
        for (int i = 0; i < a->nw; ++i) {
          chk(sem_rc(sem_post(&P->s)), "sem_post");
          if (r.chance(3)) sched_yield();
        }
      }
      break;
    }
    case L_RWLOCK: {
      set_op(a->role == 0 ? "lifetime rwlock reader" : a->role == 1 ? "lifetime rwlock writer" : "lifetime rwlock last writer");
      uint64_t k = r.below(6);
      for (uint64_t i = 0; i < k; ++i) {
        bool rd = a->role == 0;
        if (!chk(life_rw_lock(r, P, rd, "lifetime rwlock"), rd ? "rdlock" : "wrlock")) break;
        if (!rd) P->counter++;
        chk(pthread_rwlock_unlock(&P->rw), "rwlock unlock");
      }
      if (a->role != 2) {
        bool rd = a->role == 0;
        if (!chk(life_rw_lock(r, P, rd, "lifetime rwlock final"), rd ? "final rdlock" : "final wrlock")) break;
        if (!rd) P->expected += k;
        P->done.fetch_add(1);
        // From here on the page may be destroyed the moment this unlock has
        // released the lock.
        chk(pthread_rwlock_unlock(&P->rw), "final rwlock unlock");
      } else {
        if (!life_poll(P->done, a->nw, "lifetime rwlock: waiting for the others"))
          fail(CK_LIFETIME, "rwlock page: the other users did not finish");
        if (!chk(life_rw_lock(r, P, false, "lifetime rwlock: last wrlock"), "last wrlock")) break;
        P->expected += k;
        if (P->counter != P->expected)
          fail(CK_LIFETIME, "rwlock page: counter %llu, expected %llu", (unsigned long long)P->counter,
               (unsigned long long)P->expected);
        chk(pthread_rwlock_unlock(&P->rw), "last rwlock unlock");
        life_destroy(P, L_RWLOCK);
      }
      break;
    }
  }
  count_op(K_LIFETIME);
  t_ts = saved_ts;  // (a role played inline by the worker: its own state back)
  t_me = saved_me;
  return nullptr;
}

void op_lifetime(Rng& r) {
  set_op("lifetime");
  const int type = static_cast<int>(r.below(L_KINDS));
  auto* P = static_cast<LifePage*>(map_page());
  if (!P) {
    note("mmap failed: %s", lstest::err_name(errno));
    return;
  }
  int nw = 1 + static_cast<int>(r.below(4));
  static const int kTypes[] = {PTHREAD_MUTEX_DEFAULT, PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ERRORCHECK,
                               PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ADAPTIVE_NP};
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_settype(&ma, kTypes[r.below(5)]);
  must(pthread_mutex_init(&P->m, &ma), "lifetime mutex");
  pthread_mutexattr_destroy(&ma);
  P->cclock = r.chance(2) ? CLOCK_MONOTONIC : CLOCK_REALTIME;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, P->cclock);
  must(pthread_cond_init(&P->c, &ca), "lifetime cond");
  pthread_condattr_destroy(&ca);
  must(rw_init(&P->rw, r.chance(2) ? RK_DEFAULT : RK_WRITER_NONREC), "lifetime rwlock");
  must(sem_rc(sem_init(&P->s, 0, 0)), "lifetime sem");
  // Roles: mutex: nw users; cond: nw waiters + 1 signaller; sem: nw waiters +
  // 1 poster; rwlock: readers and writers (nw in all) + 1 last writer.
  std::vector<LifeArg*> args;
  int users = nw;
  for (int i = 0; i < nw; ++i) {
    auto* a = new LifeArg;
    a->type = type;
    a->role = type == L_RWLOCK ? (r.chance(3) ? 1 : 0) : 0;
    args.push_back(a);
  }
  if (type != L_MUTEX) {
    auto* a = new LifeArg;
    a->type = type;
    a->role = type == L_RWLOCK ? 2 : 1;
    args.push_back(a);
    if (type == L_COND) users = nw + 1;
  }
  P->users = users;
  P->users_a.store(nw);
  for (auto* a : args) {
    a->nw = nw;
    a->P = P;
    a->seed = r.next();
  }
  // Unmapping the page is the last user's; the other objects (unused by
  // this type) are left undestroyed on purpose: nothing else to do.
  if (r.chance(2) && args.size() > 1) std::swap(args.front(), args.back());  // the poster/signaller may start first
  std::vector<pthread_t> ts;
  std::vector<LifeArg*> started;
  for (auto* a : args) {
    a->ts = alloc_state("life-%d", 0);  // named below; "%s" here was an int passed for a string
    if (a->ts) snprintf(a->ts->name, sizeof a->ts->name, "life-%s-%d", kLifeName[type], a->role);
    pthread_t t;
    if (a->ts && pthread_create(&t, nullptr, life_helper, a) == 0) {
      ts.push_back(t);
      started.push_back(a);
    } else {
      // No thread: play the role here (bounded waits keep this safe).
      release_state(a->ts);
      a->ts = nullptr;
      life_helper(a);
      delete a;
    }
  }
  bool ok = true;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (!bounded_join(ts[i], nullptr, bound_ns() + 2'000'000'000, "join lifetime helpers")) {
      fail(CK_LIFETIME, "%s page: a helper (role %d) did not finish within %.0f s", kLifeName[type], started[i]->role,
           g_opt.stall_s + 2);
      ok = false;
      continue;  // abandoned
    }
    release_state(started[i]->ts);
    delete started[i];
  }
  if (!ok) dump_states("destroy-and-unmap: a helper did not finish");
  g_lifetimes_done.fetch_add(1, std::memory_order_relaxed);
}

const ClassRegistration kLifetimeOps(K_LIFETIME, [](Rng& r, sem_t*) { op_lifetime(r); });

}  // namespace torture
