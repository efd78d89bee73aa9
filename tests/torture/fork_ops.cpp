// tests/torture/fork_ops.cpp — fork in the middle of lock use (registered with the driver, torture.cpp).
#include "torture.h"

namespace torture {

// ------------------------------------------------------------ fork in the middle
//
// The forker holds a few mutexes (kinds without an owner check on unlock: the
// child's thread id differs) and maybe a read lock, and forks while the other
// threads run. The child (one thread, with whatever ghost owners and ghost
// waiters the other threads left in the objects) optionally first creates a
// thread (it reuses a dead thread's stack and scribbles on it), unlocks what
// the forker held and locks it again, probes free or ghost-held objects with
// try and short timed locks, posts to a private semaphore and takes the token
// back, optionally uses the objects from a new thread, posts k tokens to the
// process-shared semaphore and exits. Its exit status names the failed step;
// SIGALRM means it hung. The parent takes the k tokens.

enum {
  FC_THREAD = 11, FC_UNLOCK_HELD, FC_RELOCK_HELD, FC_UNLOCK_AGAIN, FC_RD_UNLOCK, FC_RW_TRY, FC_PROBE_TRY,
  FC_PROBE_TIMED, FC_SEM_PRIVATE, FC_THREAD_AFTER, FC_PSEM, FC_CHECKS
};
const char* fork_code_name(int c) {
  switch (c) {
    case FC_THREAD: return "creating a thread first";
    case FC_UNLOCK_HELD: return "unlocking a mutex the forker held";
    case FC_RELOCK_HELD: return "locking it again";
    case FC_UNLOCK_AGAIN: return "unlocking it again";
    case FC_RD_UNLOCK: return "read-unlocking the rwlock the forker read-held";
    case FC_RW_TRY: return "trywrlock of that rwlock";
    case FC_PROBE_TRY: return "trylock of another mutex";
    case FC_PROBE_TIMED: return "short clocklock of another mutex";
    case FC_SEM_PRIVATE: return "sem_post/sem_trywait on a private semaphore";
    case FC_THREAD_AFTER: return "a new thread locking the mutexes";
    case FC_PSEM: return "sem_post on the process-shared semaphore";
    case FC_CHECKS: return "a harness check (see its FAIL line)";
    case 0: return "before its first step";
  }
  return "?";
}

struct ForkPlan {
  MutexObj* held[3] = {};
  int nheld = 0;
  RwObj* rheld = nullptr;
  uint64_t rv = 0;
  MutexObj* probe[2] = {};
  SemObj* sem = nullptr;
  int posts = 1;
  bool thread_first = false, thread_after = false;
};

uint64_t total_fails() {
  uint64_t n = 0;
  for (auto& f : g_fail) n += f.load();
  return n;
}

void* child_scribbler(void*) {
  // Runs on a stack recycled from a thread that did not survive fork.
  char buf[96 * 1024];
  memset(buf, 0x5a, sizeof buf);
  asm volatile("" : : "r"(buf) : "memory");
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  if (pthread_mutex_lock(&m) != 0 || pthread_mutex_unlock(&m) != 0) return reinterpret_cast<void*>(1);
  return nullptr;
}
void* child_user(void* p) {
  auto* f = static_cast<ForkPlan*>(p);
  for (int i = 0; i < f->nheld; ++i) {
    MutexObj& m = *f->held[i];
    if (mx_acquire(m.obj(), m.kind, H_LOCK, Deadline{}) != 0) return reinterpret_cast<void*>(1);
    if (mx_release(m.obj(), m.kind) != 0) return reinterpret_cast<void*>(1);
  }
  if (f->rheld) {
    // Not a blocking rdlock: a ghost writer may be queued (and a
    // writer-preferring rwlock then refuses new readers for ever).
    int rc = pthread_rwlock_tryrdlock(&f->rheld->rw);
    if (rc == 0) pthread_rwlock_unlock(&f->rheld->rw);
    else if (rc != EBUSY) return reinterpret_cast<void*>(1);
  }
  return nullptr;
}

[[noreturn]] void fork_child(ForkPlan& f) {
  alarm(static_cast<unsigned>(g_opt.stall_s) + 5);  // hung: SIGALRM
  const uint64_t fails0 = total_fails();
  auto step = [](int s) { __atomic_store_n(g_child_step, s, __ATOMIC_SEQ_CST); };
  step(FC_THREAD);
  if (f.thread_first) {
    pthread_t t;
    void* res = nullptr;
    if (pthread_create(&t, nullptr, child_scribbler, nullptr) != 0 || pthread_join(t, &res) != 0 || res) _exit(FC_THREAD);
  }
  for (int i = 0; i < f.nheld; ++i) {
    MutexObj& m = *f.held[i];
    leave(m.owner, t_me, "fork child", m.name);
    step(FC_UNLOCK_HELD);
    if (mx_release(m.obj(), m.kind) != 0) _exit(FC_UNLOCK_HELD);
    step(FC_RELOCK_HELD);
    if (mx_acquire(m.obj(), m.kind, H_LOCK, Deadline{}) != 0) _exit(FC_RELOCK_HELD);
    enter(m.owner, t_me, "fork child", m.name);
    m.counter++;
    m.shadow.fetch_add(1);
    leave(m.owner, t_me, "fork child", m.name);
    step(FC_UNLOCK_AGAIN);
    if (mx_release(m.obj(), m.kind) != 0) _exit(FC_UNLOCK_AGAIN);
  }
  if (f.rheld) {
    step(FC_RD_UNLOCK);
    rd_leave(*f.rheld, f.rv, "fork child");
    if (pthread_rwlock_unlock(&f.rheld->rw) != 0) _exit(FC_RD_UNLOCK);
    step(FC_RW_TRY);
    int rc = pthread_rwlock_trywrlock(&f.rheld->rw);  // ghost readers may hold it
    if (rc == 0) pthread_rwlock_unlock(&f.rheld->rw);
    else if (rc != EBUSY) _exit(FC_RW_TRY);
  }
  for (MutexObj* m : f.probe) {
    if (!m) continue;
    step(FC_PROBE_TRY);
    int rc = mx_acquire(m->obj(), m->kind, H_TRY, Deadline{});  // free at fork, or a ghost holds it
    if (rc == 0) mx_release(m->obj(), m->kind);
    else if (rc != EBUSY) _exit(FC_PROBE_TRY);
    step(FC_PROBE_TIMED);
    Deadline d = far_deadline(CLOCK_MONOTONIC, 2);
    rc = mx_acquire(m->obj(), m->kind, H_CLOCK_MONO, d);
    if (rc == 0) mx_release(m->obj(), m->kind);
    else if (rc != ETIMEDOUT && rc != EDEADLK) _exit(FC_PROBE_TIMED);
  }
  step(FC_SEM_PRIVATE);
  if (sem_post(&f.sem->s) != 0 || sem_trywait(&f.sem->s) != 0) _exit(FC_SEM_PRIVATE);
  step(FC_THREAD_AFTER);
  if (f.thread_after) {
    pthread_t t;
    void* res = nullptr;
    if (pthread_create(&t, nullptr, child_user, &f) != 0 || pthread_join(t, &res) != 0 || res) _exit(FC_THREAD_AFTER);
  }
  step(FC_PSEM);
  for (int i = 0; i < f.posts; ++i)
    if (sem_post(g_psem) != 0) _exit(FC_PSEM);
  if (total_fails() != fails0) _exit(FC_CHECKS);
  _exit(0);
}

void op_fork(Rng& r) {
  bool expect = false;
  if (!g_fork_busy.compare_exchange_strong(expect, true)) return;
  set_op("fork");
  ForkPlan f;
  for (int tries = 0; tries < 6 && f.nheld < 3; ++tries) {
    MutexObj* m = r.chance(4) ? pick(r, g_c11m) : pick(r, g_mutex);
    if (!(mk_plain_pthread(m->kind) || m->kind == MK_C11_PLAIN || m->kind == MK_C11_TIMED)) continue;
    bool dup = false;
    for (int i = 0; i < f.nheld; ++i) dup |= f.held[i] == m;
    if (dup) continue;
    int rc = mx_acquire(m->obj(), m->kind, H_TRY, Deadline{});
    if (rc == 0) {
      enter(m->owner, t_me, "held across fork", m->name);
      f.held[f.nheld++] = m;
    } else if (rc != EBUSY) {
      fail(CK_ERRNO, "trylock of %s returned %s", m->name, lstest::err_name(rc));
    }
  }
  if (r.chance(2)) {
    RwObj* o = pick(r, g_rw);
    if (pthread_rwlock_tryrdlock(&o->rw) == 0) {
      f.rv = rd_enter(*o, "read-held across fork");
      f.rheld = o;
    }
  }
  for (auto& p : f.probe) {
    MutexObj* m = pick(r, g_mutex);
    bool held = false;
    for (int i = 0; i < f.nheld; ++i) held |= f.held[i] == m;
    p = held ? nullptr : m;
  }
  f.sem = pick(r, g_sem);
  f.posts = 1 + static_cast<int>(r.below(3));
  f.thread_first = r.chance(2);
  f.thread_after = r.chance(2);
  __atomic_store_n(g_child_step, 0, __ATOMIC_SEQ_CST);
  pid_t pid = fork();
  if (pid == 0) fork_child(f);
  int fork_errno = errno;
  if (f.rheld) {
    rd_leave(*f.rheld, f.rv, "read-held across fork");
    int rc = pthread_rwlock_unlock(&f.rheld->rw);
    if (rc != 0) fail(CK_ERRNO, "rwlock_unlock of %s after fork: %s", f.rheld->name, lstest::err_name(rc));
  }
  for (int i = 0; i < f.nheld; ++i) {
    leave(f.held[i]->owner, t_me, "held across fork", f.held[i]->name);
    int rc = mx_release(f.held[i]->obj(), f.held[i]->kind);
    if (rc != 0) fail(CK_ERRNO, "unlock of %s after fork: %s", f.held[i]->name, lstest::err_name(rc));
  }
  if (pid < 0) {
    note("fork: %s", lstest::err_name(fork_errno));
    g_fork_busy.store(false);
    return;
  }
  const int64_t B = bound_ns();
  int st = 0;
  bool done = false;
  {
    int64_t end = mono() + B + 6'000'000'000;
    WaitScope ws(W_BOUNDED, nullptr, "waitpid (fork child)", end + B);
    while (mono() < end) {
      pid_t w = waitpid(pid, &st, WNOHANG);
      if (w == pid) {
        done = true;
        break;
      }
      if (w < 0 && errno != EINTR) break;
      sleep_ns(500'000);
    }
  }
  char plan[160];
  snprintf(plan, sizeof plan, "held %d mutexes%s, %s, %s", f.nheld, f.rheld ? " + a read lock" : "",
           f.thread_first ? "thread first" : "no thread first", f.thread_after ? "thread after" : "no thread after");
  if (!done) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    fail(CK_FORK, "a child of fork (pid %d; %s) did not finish within %.0f s; killed in step: %s", pid, plan,
         g_opt.stall_s + 6, fork_code_name(__atomic_load_n(g_child_step, __ATOMIC_SEQ_CST)));
  } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
    for (int i = 0; i < f.posts; ++i) {
      timespec far = mono_in(B);
      int rc = sem_rc(sem_clockwait(g_psem, CLOCK_MONOTONIC, &far));
      if (rc != 0) {
        fail(CK_FORK, "token %d/%d the child posted to the process-shared semaphore cannot be taken: %s", i + 1, f.posts,
             lstest::err_name(rc));
        break;
      }
    }
  } else {
    if (WIFSIGNALED(st))
      fail(CK_FORK, "a child of fork (%s) was killed by signal %d (%s) in step: %s", plan, WTERMSIG(st),
           WTERMSIG(st) == SIGALRM ? "it hung" : strsignal(WTERMSIG(st)),
           fork_code_name(__atomic_load_n(g_child_step, __ATOMIC_SEQ_CST)));
    else
      fail(CK_FORK, "a child of fork (%s) exited with status %d: %s failed", plan, WEXITSTATUS(st),
           fork_code_name(WEXITSTATUS(st)));
    while (sem_trywait(g_psem) == 0) {
    }
  }
  g_forks_done.fetch_add(1, std::memory_order_relaxed);
  count_op(K_FORK);
  g_fork_busy.store(false);
}

const ClassRegistration kForkOps(K_FORK, [](Rng& r, sem_t*) { op_fork(r); });

}  // namespace torture
