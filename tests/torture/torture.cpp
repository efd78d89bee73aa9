// tests/torture/torture.cpp — a locktorture-style randomized torture test of
// every primitive lockswap interposes: pthread mutexes of every kind, rwlocks,
// condition variables, C11 mtx/cnd and POSIX unnamed semaphores, with thread
// cancellation (deferred and asynchronous), fork, and destroy-and-unmap in
// the middle. It uses only the plain pthread / C11 / sem API, so it tortures
// whatever is preloaded (or glibc itself when nothing is).
//
// Each worker draws its operations from a generator seeded from --seed (always
// printed), so a failing run prints the command that repeats its operation
// mix; the interleaving is the scheduler's.
//
// The harness never coordinates through a primitive under test: the checks
// are atomics, the watchdog reads atomics (and sem_getvalue), joins are
// pthread_clockjoin_np. Two helpers do use the primitives, as any program
// would: a feeder posts to (produces on) a shared semaphore (condvar) whose
// waiters found it empty twice in a row, so that random waits always end;
// and the stop sequence broadcasts every condvar.
//
// Run: torture [--seed S] [--seconds T] [--threads N] [--no-fork]
//      [--no-cancel] [--no-async-cancel] [--only CLASSES] [--verbose]
// Under a variant: build/bin/lockswap --variant rwsem -- build/tests/torture/torture --seconds 3600
// It prints ops=<total> and per-class counts, one line per check (ok, FAILED
// or skipped), the reproduction command, and last "N passed, M failed"
// (N, M: checks); the exit status is non-zero on any failure. A fatal signal
// prints the seed and the reproduction command before the process dies.
// Self-test of the harness (not for CI): --inject lost-signal (drops some
// cond/handshake wake-ups: the watchdog reports the stuck handshake),
// lost-post (counts sem posts it skips: sem_token_conservation fails),
// no-lock (skips some mutex acquisitions: mutual_exclusion fails).
//
// Checks (each one line of the closing summary, "N passed, M failed"):
//   mutual_exclusion          an owner word set/cleared inside every critical
//                             section (mutexes, C11 mtx, condvar mutexes)
//   reader_writer_exclusion   reader count vs writer word, torn writes
//   protected_counters        plain counters under the lock == atomic shadows
//   cond_no_lost_wakeup       token protocol on condvars: produced ==
//                             consumed + left, reservations all honoured
//   sem_token_conservation    value == init + posted - consumed, exact final
//                             values, "a reserved token can be taken at once"
//   handshake_rounds          ping-pong pairs (cond, C11 cnd, sem) in step
//   return_codes              every call returns what glibc documents
//   timeouts                  no ETIMEDOUT before the deadline, no wait
//                             past it (watchdog)
//   progress                  watchdog: no thread blocked past --stall-seconds
//                             while the object it waits for is free (owner
//                             words, reader/writer words); no wait past 6x
//                             that bound at all; every object free at the end
//   destroy_and_unmap         the last user destroys and munmaps at once:
//                             no crash, no late write into the page
//   deferred_cancel           cancelled waiters: cleanup sees a consistent
//                             state, lock calls are not cancellation points
//   async_cancel              asynchronous cancellation while blocked or
//                             spinning in a lock call; the lock stays usable
//                             (not checked for glibc's own rwlock, which an
//                             async-cancelled waiter leaves unusable)
//   fork                      the child uses locks the forker held or that
//                             were free, with ghost waiters from the parent
#include "torture.h"

namespace torture {

// ------------------------------------------------------------ feeder
//
// A waiter on a shared semaphore or condvar may wait for a token that no
// worker happens to produce. The feeder posts (produces) one when waiters
// have found a zero value for two samples in a row. It never feeds an object
// whose value is positive while waiters sleep: that is the watchdog's lost
// wakeup.

std::atomic<bool> g_feeder_stop{false};

void* feeder(void* p) {
  adopt_state(static_cast<TState*>(p));
  set_op("feeding");
  while (!g_feeder_stop.load()) {
    for (SemObj* s : g_sem) {
      bool starving = s->blocked.load() > 0 && sem_value(&s->s) == 0;
      if (starving && s->feed_seen) {
        if (sem_post(&s->s) == 0) {
          s->posted.fetch_add(1);
          g_feeds.fetch_add(1, std::memory_order_relaxed);
        }
        s->feed_seen = false;
      } else {
        s->feed_seen = starving;
      }
    }
    for (auto* list : {&g_cond, &g_c11c})
      for (CondObj* c : *list) {
        bool starving = c->untimed_a.load() > 0 && c->tokens_a.load() == 0;
        if (starving && c->feed_seen) {
          cond_lock(*c, "feeder");
          if (c->tokens == 0 && c->waiters > 0) {
            c->tokens++;
            c->tokens_a.store(c->tokens);
            c->produced.fetch_add(1);
            g_feeds.fetch_add(1, std::memory_order_relaxed);
            int rc = cv_wake(*c, false);
            if (rc != 0) fail(CK_ERRNO, "feeder: signal of %s: %s", c->name, lstest::err_name(rc));
          }
          cond_unlock(*c, "feeder");
          c->feed_seen = false;
        } else {
          c->feed_seen = starving;
        }
      }
    if (t_ts) t_ts->progress.store(mono());
    sleep_ns(g_stop.load() ? 2'000'000 : 5'000'000);
  }
  return nullptr;
}

// ------------------------------------------------------------ workers

std::atomic<int64_t> g_last[NCLASS];

uint64_t mix(uint64_t a, uint64_t b) {
  Rng r(a ^ (b * 0xD1B54A32D192ED03ull));
  r.next();
  return r.next();
}

// A class by weight; the expensive ones at most once per kMinIntervalNs
// (globally); -1 when nothing is due.
int pick_class(Rng& r) {
  uint32_t total = 0;
  for (int c = 0; c < NCLASS; ++c)
    if (c != K_HANDSHAKE) total += g_opt.weight[c];
  if (total == 0) return -1;
  for (int attempt = 0; attempt < 4; ++attempt) {
    uint32_t x = r.below(total);
    int c = 0;
    while (c == K_HANDSHAKE || x >= g_opt.weight[c]) {
      if (c != K_HANDSHAKE) x -= g_opt.weight[c];
      ++c;
    }
    if (kMinIntervalNs[c] == 0) return c;
    int64_t now = mono(), last = g_last[c].load();
    if (now - last >= kMinIntervalNs[c] && g_last[c].compare_exchange_strong(last, now)) return c;
  }
  return -1;
}

struct WorkerArg {
  int idx;
  TState* ts;
};

void* worker(void* p) {
  auto* a = static_cast<WorkerArg*>(p);
  adopt_state(a->ts);
  Rng r(mix(g_opt.seed, static_cast<uint64_t>(a->idx) + 1));
  sem_t mine;
  sem_init(&mine, 0, 0);
  while (!g_go.load()) sched_yield();
  while (!g_stop.load()) {
    int c = pick_class(r);
    if (c >= 0 && g_class_ops[c]) g_class_ops[c](r, &mine);  // the family's registered operation
    else sleep_ns(1'000'000);
    between_ops(r);
  }
  set_op("done");
  sem_destroy(&mine);
  return nullptr;
}

// ------------------------------------------------------------ watchdog

const char* obj_name(int kind, const void* obj) {
  if (!obj) return "-";
  switch (kind) {
    case W_MUTEX: return static_cast<const MutexObj*>(obj)->name;
    case W_CMUTEX:
    case W_COND: return static_cast<const CondObj*>(obj)->name;
    case W_RWLOCK: return static_cast<const RwObj*>(obj)->name;
    case W_SEM: return static_cast<const SemObj*>(obj)->name;
    case W_HS: return kHsName[static_cast<const HsPair*>(obj)->type];
  }
  return "-";
}

// Is the object the thread waits for free (so that it should not sleep)?
bool wait_is_free(int kind, const void* obj, int mode) {
  switch (kind) {
    case W_MUTEX: return static_cast<const MutexObj*>(obj)->owner.load() == 0;
    case W_CMUTEX: return static_cast<const CondObj*>(obj)->owner.load() == 0;
    case W_RWLOCK: {
      auto* o = static_cast<const RwObj*>(obj);
      if (mode == 2) return o->writer.load() == 0;  // recursive read on the default kind
      return o->writer.load() == 0 && o->readers.load() == 0;
    }
    case W_COND: {
      auto* c = static_cast<const CondObj*>(obj);
      return (c->tokens_a.load() > 0 || g_stop.load()) && c->owner.load() == 0;
    }
    case W_SEM: return sem_value(&const_cast<SemObj*>(static_cast<const SemObj*>(obj))->s) > 0;
    case W_HS: {
      auto* h = const_cast<HsPair*>(static_cast<const HsPair*>(obj));
      if (h->type == HS_SEM) return sem_value(&h->s[mode]) > 0;
      return (h->turn_a.load() == mode || g_stop.load()) && h->owner.load() == 0;
    }
  }
  return false;
}

std::string obj_state(int kind, const void* obj, int mode) {
  char b[200] = "";
  switch (kind) {
    case W_MUTEX: snprintf(b, sizeof b, "owner=%d", static_cast<const MutexObj*>(obj)->owner.load()); break;
    case W_CMUTEX:
    case W_COND: {
      auto* c = static_cast<const CondObj*>(obj);
      snprintf(b, sizeof b, "owner=%d tokens=%llu waiters=%d untimed=%d", c->owner.load(),
               (unsigned long long)c->tokens_a.load(), c->waiters_a.load(), c->untimed_a.load());
      break;
    }
    case W_RWLOCK: {
      auto* o = static_cast<const RwObj*>(obj);
      snprintf(b, sizeof b, "readers=%d writer=%d mode=%s", o->readers.load(), o->writer.load(),
               mode == 0 ? "write" : mode == 1 ? "read" : "recursive read");
      break;
    }
    case W_SEM: {
      auto* s = const_cast<SemObj*>(static_cast<const SemObj*>(obj));
      snprintf(b, sizeof b, "value=%d blocked=%d", sem_value(&s->s), s->blocked.load());
      break;
    }
    case W_HS: {
      auto* h = const_cast<HsPair*>(static_cast<const HsPair*>(obj));
      snprintf(b, sizeof b, "side=%d turn=%d owner=%d rounds=%llu/%llu%s", mode, h->turn_a.load(), h->owner.load(),
               (unsigned long long)h->rounds[0].load(), (unsigned long long)h->rounds[1].load(),
               h->type == HS_SEM ? (sem_value(&h->s[mode]) > 0 ? " sem>0" : " sem=0") : "");
      break;
    }
  }
  return b;
}

void dump_states(const char* why) {
  int64_t now = mono(), last = g_last_dump.load();
  if (now - last < 5'000'000'000 && last != 0) return;
  if (!g_last_dump.compare_exchange_strong(last, now)) return;
  int old;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  fprintf(stderr, "torture: ---- thread states (%s) ----\n", why);
  for (auto& s : g_states) {
    if (s.used.load() != 1) continue;
    int kind = s.wkind.load();
    const void* obj = s.wobj.load();
    int mode = s.wmode.load();
    if (kind == W_NONE) {
      fprintf(stderr, "torture:   %-22s tid %-7d running %-32s (last progress %.2f s ago)\n", s.name, s.tid.load(),
              s.op.load(), (now - s.progress.load()) / 1e9);
    } else {
      int64_t lim = s.wlimit.load();
      char dl[64] = "";
      if (lim) snprintf(dl, sizeof dl, ", %s %.1f ms", kind == W_BOUNDED ? "bound in" : "deadline in", (lim - now) / 1e6);
      fprintf(stderr, "torture:   %-22s tid %-7d waits  %-32s in %s on %s for %.2f s%s [%s]\n", s.name, s.tid.load(),
              s.wwhat.load(), kWaitName[kind], obj_name(kind, obj), (now - s.wsince.load()) / 1e9, dl,
              kind == W_BOUNDED ? "" : obj_state(kind, obj, mode).c_str());
    }
  }
  fprintf(stderr, "torture: ---- seed %llu; reproduce: %s\n", (unsigned long long)g_opt.seed, g_repro);
  pthread_setcancelstate(old, &old);
}

void watchdog_scan() {
  const int64_t now = mono(), B = bound_ns();
  for (auto& s : g_states) {
    if (s.used.load(std::memory_order_acquire) != 1) continue;
    int kind = s.wkind.load(std::memory_order_acquire);
    if (kind == W_NONE) {
      s.seen_wsince = -1;
      s.free_since = 0;
      int64_t pr = s.progress.load();
      if (now - pr > 6 * B && s.reported_idle != pr) {
        s.reported_idle = pr;
        fail(CK_PROGRESS, "%s (tid %d) made no progress for %.1f s, running %s", s.name, s.tid.load(), (now - pr) / 1e9,
             s.op.load());
        dump_states("no progress");
      }
      continue;
    }
    const int64_t since = s.wsince.load(), limit = s.wlimit.load();
    const void* obj = s.wobj.load();
    const char* what = s.wwhat.load();
    const int mode = s.wmode.load();
    if (kind != s.wkind.load() || since != s.wsince.load()) continue;  // moved on meanwhile
    if (since != s.seen_wsince) {
      s.seen_wsince = since;
      s.free_since = 0;
    }
    if (kind == W_BOUNDED) {
      int64_t lim = limit ? limit : since + B;
      if (now > lim && s.reported_wsince != since) {
        s.reported_wsince = since;
        fail(CK_PROGRESS, "%s (tid %d) is still in \"%s\" after %.1f s (past its bound)", s.name, s.tid.load(), what,
             (now - since) / 1e9);
        dump_states("a bounded wait overran");
      }
      continue;
    }
    if (limit && now > limit + B && s.reported_late != since) {
      s.reported_late = since;
      fail(CK_TIMEOUTS, "%s (tid %d) is still in %s on %s %.1f s past its deadline", s.name, s.tid.load(), what,
           obj_name(kind, obj), (now - limit) / 1e9);
      dump_states("a timed wait overran its deadline");
    }
    if (!wait_is_free(kind, obj, mode)) {
      s.free_since = 0;
    } else if (s.free_since == 0) {
      s.free_since = now;
    } else if (now - s.free_since >= B && s.reported_wsince != since) {
      s.reported_wsince = since;
      Check c = kind == W_COND ? CK_COND : kind == W_SEM ? CK_SEM : kind == W_HS ? CK_HANDSHAKE : CK_PROGRESS;
      fail(c, "%s (tid %d) has waited in %s on %s for %.1f s, while what it waits for was available for the last %.1f s "
           "(%s): lost wakeup",
           s.name, s.tid.load(), what, obj_name(kind, obj), (now - since) / 1e9, (now - s.free_since) / 1e9,
           obj_state(kind, obj, mode).c_str());
      dump_states("lost wakeup");
    }
    if (now - since > 6 * B && s.reported_wsince != since) {
      s.reported_wsince = since;
      fail(CK_PROGRESS, "%s (tid %d) has been blocked in %s on %s for %.1f s (%s)", s.name, s.tid.load(), what,
           obj_name(kind, obj), (now - since) / 1e9, obj_state(kind, obj, mode).c_str());
      dump_states("blocked too long");
    }
  }
}

uint64_t ops_now(uint64_t per[NCLASS]) {
  uint64_t total = 0;
  for (int c = 0; c < NCLASS; ++c) per[c] = g_ops_total[c].load();
  for (auto& s : g_states)
    if (s.used.load() == 1)
      for (int c = 0; c < NCLASS; ++c) per[c] += s.ops[c].load(std::memory_order_relaxed);
  for (int c = 0; c < NCLASS; ++c) total += per[c];
  return total;
}

// ------------------------------------------------------------ the end

void* stopper_main(void* p) {
  adopt_state(static_cast<TState*>(p));
  set_op("stop broadcasts");
  for (auto* list : {&g_cond, &g_c11c})
    for (CondObj* c : *list) {
      cond_lock(*c, "stop");
      cv_wake(*c, true);
      cond_unlock(*c, "stop");
    }
  if (g_opt.weight[K_HANDSHAKE])
    for (HsPair& h : g_hs) {
      if (h.type == HS_SEM) {
        sem_post(&h.s[0]);
        sem_post(&h.s[1]);
      } else {
        hs_lock(h);
        hs_wake(h, true);
        hs_unlock(h);
      }
    }
  set_op("done");
  return nullptr;
}

// Checks once every thread has finished: exact counters and values, and
// every object free and usable.
void final_checks() {
  for (auto* list : {&g_mutex, &g_c11m})
    for (MutexObj* o : *list) {
      if (o->counter != o->shadow.load())
        fail(CK_COUNTERS, "%s: final counter %llu, shadow %llu", o->name, (unsigned long long)o->counter,
             (unsigned long long)o->shadow.load());
      if (o->owner.load() != 0) fail(CK_MUTEX_EXCL, "%s: owner word %d left at the end", o->name, o->owner.load());
      int rc = mx_acquire(o->obj(), o->kind, H_TRY, Deadline{});
      if (rc != 0) fail(CK_PROGRESS, "%s is not free at the end: trylock returned %s", o->name, lstest::err_name(rc));
      else mx_release(o->obj(), o->kind);
    }
  for (RwObj* o : g_rw) {
    if (o->counter != o->shadow.load())
      fail(CK_COUNTERS, "%s: final counter %llu, shadow %llu", o->name, (unsigned long long)o->counter,
           (unsigned long long)o->shadow.load());
    if (o->readers.load() != 0 || o->writer.load() != 0)
      fail(CK_RW_EXCL, "%s: %d readers / writer %d left at the end", o->name, o->readers.load(), o->writer.load());
    int rc = pthread_rwlock_trywrlock(&o->rw);
    if (rc != 0) fail(CK_PROGRESS, "%s is not free at the end: trywrlock returned %s", o->name, lstest::err_name(rc));
    else pthread_rwlock_unlock(&o->rw);
  }
  for (auto* list : {&g_cond, &g_c11c})
    for (CondObj* c : *list) {
      uint64_t p = c->produced.load(), k = c->consumed.load();
      if (p != k + c->tokens)
        fail(CK_COND, "%s: produced %llu tokens, consumed %llu, %llu left: %lld unaccounted", c->name,
             (unsigned long long)p, (unsigned long long)k, (unsigned long long)c->tokens,
             (long long)(p - k - c->tokens));
      if (c->waiters != 0 || c->waiters_a.load() != 0 || c->untimed_a.load() != 0)
        fail(CK_COND, "%s: %d waiters left in the bookkeeping at the end", c->name, c->waiters);
      if (c->owner.load() != 0) fail(CK_MUTEX_EXCL, "%s: owner word %d left at the end", c->name, c->owner.load());
    }
  for (SemObj* s : g_sem) {
    int64_t expect = int64_t{s->init} + static_cast<int64_t>(s->posted.load()) - static_cast<int64_t>(s->consumed.load());
    int v = sem_value(&s->s);
    if (v != expect)
      fail(CK_SEM, "%s: final value %d, expected init %u + posted %llu - consumed %llu = %lld", s->name, v, s->init,
           (unsigned long long)s->posted.load(), (unsigned long long)s->consumed.load(), (long long)expect);
    int64_t taken = 0;
    while (sem_trywait(&s->s) == 0 && taken <= expect + 1000) ++taken;
    if (taken != expect) fail(CK_SEM, "%s: %lld tokens could be taken at the end, expected %lld", s->name, (long long)taken, (long long)expect);
    if (s->blocked.load() != 0) fail(CK_SEM, "%s: %d waiters left in the bookkeeping", s->name, s->blocked.load());
  }
  int pv = sem_value(g_psem);
  if (pv != 0) fail(CK_FORK, "the process-shared semaphore has value %d at the end (expected 0)", pv);
  if (g_opt.weight[K_HANDSHAKE])
    for (HsPair& h : g_hs) {
      uint64_t a = h.rounds[0].load(), b = h.rounds[1].load();
      if (a != b && a != b + 1)
        fail(CK_HANDSHAKE, "%s: rounds %llu and %llu out of step", kHsName[h.type], (unsigned long long)a, (unsigned long long)b);
      if (a == 0 && g_opt.seconds >= 1) fail(CK_HANDSHAKE, "%s made no round at all", kHsName[h.type]);
    }
}

void on_fatal(int sig, siginfo_t* si, void*) {
  char buf[2600];
  char where[120] = "";
  if ((sig == SIGSEGV || sig == SIGBUS) && si)
    snprintf(where, sizeof where, " at address %p (a late access to an unmapped lock page shows here)", si->si_addr);
  int n = snprintf(buf, sizeof buf, "torture[%d]: FATAL: signal %d (%s)%s\ntorture: seed %llu; reproduce: %s\n", getpid(),
                   sig, sigabbrev_np(sig) ? sigabbrev_np(sig) : "?", where, (unsigned long long)g_opt.seed, g_repro);
  if (n > 0) {
    ssize_t w = write(2, buf, static_cast<size_t>(n < (int)sizeof buf ? n : (int)sizeof buf - 1));
    (void)w;
  }
  if (TState* ts = t_ts) {  // what the crashing thread was doing
    int kind = ts->wkind.load();
    n = snprintf(buf, sizeof buf, "torture: the crashing thread: %s (tid %d), op \"%s\"%s%s%s\n", ts->name, current_tid(),
                 ts->op.load(), kind != W_NONE ? ", waiting in \"" : "", kind != W_NONE ? ts->wwhat.load() : "",
                 kind != W_NONE ? "\"" : "");
    if (n > 0) {
      ssize_t w = write(2, buf, static_cast<size_t>(n < (int)sizeof buf ? n : (int)sizeof buf - 1));
      (void)w;
    }
  }
  // Every live thread's operation (a victim of asynchronous cancellation has
  // no state of its own: its canceller's op names the call it was in).
  for (auto& st : g_states) {
    if (st.used.load() != 1) continue;
    n = snprintf(buf, sizeof buf, "torture:   %s: %s\n", st.name, st.op.load());
    if (n > 0) {
      ssize_t w = write(2, buf, static_cast<size_t>(n < (int)sizeof buf ? n : (int)sizeof buf - 1));
      (void)w;
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void usage(FILE* f) {
  fprintf(f,
          "usage: torture [--seed S] [--seconds T] [--threads N] [--stall-seconds B]\n"
          "               [--no-fork] [--no-cancel] [--no-async-cancel] [--only CLASS,...] [--verbose]\n"
          "  --seed S          operation mix (default: from the clock; always printed)\n"
          "  --seconds T       run time (default 10; hours for a long run)\n"
          "  --threads N       workers (default 4 x online CPUs: oversubscribed)\n"
          "  --stall-seconds B progress bound: a waiter whose object stays free for B s fails (default 10)\n"
          "  --no-fork, --no-cancel (deferred and asynchronous), --no-async-cancel\n"
          "  --only LIST       only these classes: mutex,c11,rwlock,cond,sem,lifetime,cancel,async_cancel,fork,handshake\n"
          "Prints ops=<total> with per-class counts, one line per check, and last \"N passed, M failed\".\n");
}

bool parse_num(const char* s, double* out) {
  char* end = nullptr;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end) return false;
  *out = v;
  return true;
}

}  // namespace torture

using namespace torture;

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  g_opt.argv0 = argv[0];
  for (int c = 0; c < NCLASS; ++c) g_opt.weight[c] = kDefaultWeight[c];
  bool have_seed = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](double* out) {
      if (i + 1 >= argc || !parse_num(argv[i + 1], out)) {
        fprintf(stderr, "torture: %s needs a number\n", a.c_str());
        usage(stderr);
        exit(2);
      }
      ++i;
    };
    double v;
    if (a == "--seed") {
      if (i + 1 >= argc) {
        usage(stderr);
        return 2;
      }
      char* end = nullptr;
      g_opt.seed = strtoull(argv[++i], &end, 0);
      if (!end || *end) {
        fprintf(stderr, "torture: bad seed %s\n", argv[i]);
        return 2;
      }
      have_seed = true;
    } else if (a == "--seconds") {
      val(&v);
      g_opt.seconds = v;
    } else if (a == "--threads") {
      val(&v);
      g_opt.threads = static_cast<int>(v);
    } else if (a == "--stall-seconds") {
      val(&v);
      g_opt.stall_s = v;
      g_opt.extra += " --stall-seconds " + std::string(argv[i]);
    } else if (a == "--no-fork") {
      g_opt.weight[K_FORK] = 0;
      g_opt.extra += " --no-fork";
    } else if (a == "--no-cancel") {
      g_opt.weight[K_CANCEL] = g_opt.weight[K_ASYNC] = 0;
      g_opt.extra += " --no-cancel";
    } else if (a == "--no-async-cancel") {
      g_opt.weight[K_ASYNC] = 0;
      g_opt.extra += " --no-async-cancel";
    } else if (a == "--only") {
      if (i + 1 >= argc) {
        usage(stderr);
        return 2;
      }
      std::string list = std::string(",") + argv[++i] + ",";
      for (int c = 0; c < NCLASS; ++c)
        if (list.find(std::string(",") + kClassName[c] + ",") == std::string::npos) g_opt.weight[c] = 0;
      g_opt.extra += " --only " + std::string(argv[i]);
    } else if (a == "--inject") {  // harness self-test, not for CI
      if (i + 1 >= argc) {
        usage(stderr);
        return 2;
      }
      g_opt.inject = argv[++i];
      g_opt.extra += " --inject " + g_opt.inject;
    } else if (a == "--verbose" || a == "-v") {
      g_opt.verbose = true;
    } else if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "torture: unknown option %s\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (!have_seed) {
    timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    g_opt.seed = mix(static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec),
                     static_cast<uint64_t>(getpid())) % 1'000'000'000'000ull;
  }
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (g_opt.threads <= 0) g_opt.threads = 4 * static_cast<int>(ncpu > 0 ? ncpu : 1);
  if (g_opt.threads > 128) g_opt.threads = 128;
  if (g_opt.stall_s < 1) g_opt.stall_s = 1;
  g_native_mutex = env_native("LOCKSWAP_MUTEX");
  g_native_rwlock = env_native("LOCKSWAP_RWLOCK");
  g_native_sem = env_native("LOCKSWAP_SEM");

  // The reproduction command: the environment that chooses the variant, then
  // the same options with the seed.
  std::string env;
  for (char** e = environ; *e; ++e)
    if (strncmp(*e, "LOCKSWAP_", 9) == 0 || strncmp(*e, "LD_PRELOAD=", 11) == 0) env += std::string(*e) + " ";
  char opts[256];
  snprintf(opts, sizeof opts, " --seed %llu --seconds %g --threads %d", (unsigned long long)g_opt.seed, g_opt.seconds,
           g_opt.threads);
  snprintf(g_repro, sizeof g_repro, "%s%s%s%s", env.c_str(), g_opt.argv0.c_str(), opts, g_opt.extra.c_str());

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  for (int s : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigaction(s, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  printf("torture: seed %llu, %g s, %d workers (%ld CPUs), progress bound %g s; mutex %s, rwlock %s, sem %s\n",
         (unsigned long long)g_opt.seed, g_opt.seconds, g_opt.threads, ncpu, g_opt.stall_s,
         g_native_mutex ? getenv("LOCKSWAP_MUTEX") : "glibc", g_native_rwlock ? getenv("LOCKSWAP_RWLOCK") : "glibc",
         g_native_sem ? getenv("LOCKSWAP_SEM") : "glibc");
  printf("torture: reproduce: %s\n", g_repro);

  make_objects();
  TState* main_ts = alloc_state("main", 0);
  adopt_state(main_ts);
  set_op("watchdog");

  // Threads: handshake pairs, the feeder, the workers.
  std::vector<pthread_t> hs_threads, workers;
  std::vector<HsArg*> hs_args;
  std::vector<WorkerArg*> wargs;
  if (g_opt.weight[K_HANDSHAKE])
    for (HsPair& h : g_hs)
      for (int side = 0; side < 2; ++side) {
        auto* a = new HsArg{&h, side, mix(g_opt.seed, 1000 + static_cast<uint64_t>(h.type) * 2 + static_cast<uint64_t>(side)),
                            alloc_state("hs-%d", h.type * 2 + side)};
        pthread_t t;
        must(pthread_create(&t, nullptr, hs_thread, a), "pthread_create (handshake)");
        hs_threads.push_back(t);
        hs_args.push_back(a);
      }
  TState* feeder_ts = alloc_state("feeder", 0);
  pthread_t feeder_t;
  must(pthread_create(&feeder_t, nullptr, feeder, feeder_ts), "pthread_create (feeder)");
  for (int i = 0; i < g_opt.threads; ++i) {
    auto* a = new WorkerArg{i, alloc_state("worker-%d", i)};
    pthread_t t;
    must(pthread_create(&t, nullptr, worker, a), "pthread_create (worker)");
    workers.push_back(t);
    wargs.push_back(a);
  }

  const int64_t start = mono();
  const int64_t end = start + static_cast<int64_t>(g_opt.seconds * 1e9);
  const int64_t status_every = g_opt.verbose ? 5'000'000'000 : 60'000'000'000;
  int64_t next_status = start + status_every;
  g_go.store(true);
  while (mono() < end) {
    sleep_ns(50'000'000);
    watchdog_scan();
    main_ts->progress.store(mono());
    if (mono() >= next_status) {
      uint64_t per[NCLASS];
      uint64_t total = ops_now(per);
      printf("torture: %.0f s: ops=%llu, %llu failures so far\n", (mono() - start) / 1e9, (unsigned long long)total,
             (unsigned long long)total_fails());
      next_status += status_every;
    }
  }

  // Stop: a stopper thread wakes every waiter whose predicate is the stop
  // flag (the main thread makes no lock call that could hang); then join
  // with a bound (the feeder keeps posting to starving semaphores meanwhile).
  set_op("stopping");
  g_stop.store(true);
  pthread_t stopper_t;
  bool stopper = pthread_create(&stopper_t, nullptr, stopper_main, alloc_state("stopper", 0)) == 0;
  const int64_t join_end = mono() + bound_ns() + 20'000'000'000;
  std::vector<bool> joined(workers.size() + hs_threads.size(), false);
  size_t left = joined.size();
  while (left > 0 && mono() < join_end) {
    for (size_t i = 0; i < joined.size(); ++i) {
      if (joined[i]) continue;
      pthread_t t = i < workers.size() ? workers[i] : hs_threads[i - workers.size()];
      if (pthread_tryjoin_np(t, nullptr) == 0) {
        joined[i] = true;
        --left;
      }
    }
    if (left == 0) break;
    sleep_ns(20'000'000);
    watchdog_scan();
    main_ts->progress.store(mono());
  }
  if (left > 0) {
    fail(CK_PROGRESS, "%zu threads did not finish within %.0f s of the stop", left, g_opt.stall_s + 20);
    g_last_dump.store(0);
    dump_states("threads that did not finish");
  }
  g_feeder_stop.store(true);
  bool feeder_done = bounded_join(feeder_t, nullptr, 5'000'000'000, "join the feeder");
  if (stopper && !bounded_join(stopper_t, nullptr, 2'000'000'000, "join the stopper")) {
    fail(CK_PROGRESS, "the stop sequence (broadcasts to every condvar) did not finish");
    feeder_done = false;
  }
  if (left == 0 && feeder_done) {
    for (size_t i = 0; i < workers.size(); ++i) release_state(wargs[i]->ts);
    for (auto* a : hs_args) release_state(a->ts);
    release_state(feeder_ts);
    final_checks();
  }
  uint64_t per[NCLASS];
  uint64_t total = ops_now(per);

  // The summary.
  std::string counts;
  for (int c = 0; c < NCLASS; ++c) counts += std::string(" ") + kClassName[c] + "=" + std::to_string(per[c]);
  printf("torture: ops=%llu%s\n", (unsigned long long)total, counts.c_str());
  printf("torture: %llu deferred cancellations, %llu asynchronous, %llu forks, %llu destroy-and-unmap pages; "
         "%llu try-busy, %llu timeouts, %llu feeds, %llu recursive reads refused, %llu async cancels inside an acquisition\n",
         (unsigned long long)g_cancelled.load(), (unsigned long long)g_async_done.load(),
         (unsigned long long)g_forks_done.load(), (unsigned long long)g_lifetimes_done.load(),
         (unsigned long long)g_busy.load(), (unsigned long long)g_timeouts.load(), (unsigned long long)g_feeds.load(),
         (unsigned long long)g_rec_busy.load(), (unsigned long long)g_async_window.load());
  int passed = 0, failed = 0;
  for (int c = 0; c < NCHECK; ++c) {
    bool skipped = (c == CK_FORK && !g_opt.weight[K_FORK]) || (c == CK_CANCEL && !g_opt.weight[K_CANCEL]) ||
                   (c == CK_ASYNC && !g_opt.weight[K_ASYNC]) || (c == CK_LIFETIME && !g_opt.weight[K_LIFETIME]) ||
                   (c == CK_HANDSHAKE && !g_opt.weight[K_HANDSHAKE]);
    uint64_t n = g_fail[c].load();
    if (skipped && n == 0) {
      printf("torture: %-24s skipped\n", kCheckName[c]);
      continue;
    }
    if (n == 0) {
      ++passed;
      printf("torture: %-24s ok\n", kCheckName[c]);
    } else {
      ++failed;
      printf("torture: %-24s FAILED (%llu)\n", kCheckName[c], (unsigned long long)n);
    }
  }
  printf("torture: seed %llu; reproduce: %s\n", (unsigned long long)g_opt.seed, g_repro);
  printf("%d passed, %d failed\n", passed, failed);
  fflush(stdout);
  fflush(stderr);
  // After a failure the library may be wedged (threads stuck in locks, an
  // internal lock left held by a cancelled thread): no exit-time handlers.
  if (failed || left > 0 || !feeder_done) _exit(1);
  return 0;
}
