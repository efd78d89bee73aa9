/* tests/model/rwsem.pml — the wait/wake/handoff protocol of core/rwsem/thread_host.cpp
 * (Linux rw_semaphore port), checked exhaustively with spin.
 *
 * What is modelled, function by function (names as in core/rwsem/thread_host.cpp
 * and the rules it runs, core/rwsem/rules.h):
 *   count word   WL (WRITER_LOCKED), WAITERS, HANDOFF, RC (reader biases);
 *                every change of it is one atomic step (it is one RMW, or a
 *                CAS loop whose successful CAS decides on the value it read).
 *   owner word   only the READER_OWNED hint (ownerR), read by the v5.11
 *                stealing rule; it is a relaxed hint in the code too.
 *   wait_lock    `wlock`, and the FIFO wait queue q[0..qlen) it guards, with
 *                each waiter's type, handoff_set, reader grant (`task`) and
 *                "waited longer than handoff_ns" (`expired`: a sticky
 *                nondeterministic timer).
 *   parking      ThreadSlot.park (a counter: no wrap-around in a bounded run)
 *                and ThreadSlot.blocked (0, or the token of the park value the
 *                thread sleeps on), park_sleep()/wake_parked() as written,
 *                and the kernel futex: futex_wait compares and enqueues in one
 *                step (the hash-bucket lock), futex_wake dequeues.
 *   paths        read fast path, read slow path (v5.11 read_steal with the
 *                anti-starvation rule, or with -DRSPIN v5.10 reader spinning
 *                reduced to its trylocks), read_queue/read_wait, write fast
 *                path, writer optimistic spinning reduced to its trylock
 *                (try_write_lock_unqueued, at most SPINS attempts),
 *                write_queue with try_write_lock (v6.3 rules), the handoff
 *                spin (nondeterministically skips the sleep while the waiter
 *                owns HANDOFF), mark_wake (writer wake, reader pre-grant,
 *                reader_handoff, grant_readers' collection, one count adjustment,
 *                grant publication), cond_wake, del_wake_waiter (timed
 *                waiters that give up: -DTIMED=<thread id>), read_unlock,
 *                write_unlock, and with -DDOWNGRADE write->read downgrade.
 * Written from core/rwsem.cpp at commit e9a5555 (with the park-token fix
 * 6879ce1), plus the wait_lock recovery after fork() of the working tree.
 * Not modelled yet: the reader-preference batches (core/read_pref.h), and
 * cancellation's leave_cancelled() beyond what a timed-out waiter does
 * (-DTIMED covers its del_wake_waiter path; a granted reader that is
 * cancelled gives the lock back like any reader).
 * Not modelled: READFAIL (reader overflow), recursive readers, the OSQ, the v5.10 NONSPINNABLE bits (they only decide
 * whether a spin is attempted: every choice is explored here anyway). The
 * model is sequentially consistent: the C++ memory-order argument is in
 * core/rwsem.h, and the aarch64 runs under qemu exercise the compiled code.
 *
 * Properties:
 *   - mutual exclusion: never a writer with anyone else in a critical section
 *     (assertions at every entry);
 *   - wait-queue invariants at every wait_lock hand-over: WAITERS == (queue
 *     non-empty), HANDOFF => WAITERS;
 *   - handoff rule: while HANDOFF is set and owned by the first waiter
 *     (handoff_set), nobody but that waiter (or the readers granted with it)
 *     acquires the lock;
 *   - no lost wakeup: every thread finishes its iterations. A thread asleep in
 *     futex_wait that nobody will wake leaves the system stuck, which spin
 *     reports as an invalid end state; the final state must be all-zero.
 *
 * -DWAITLOCK_RECOVER (with FORK): the wait_lock taken over from a lost holder
 * (WaitList::recover() in core/rwsem/wait_list.h), so a lost
 * wait_lock holder no longer excuses a child that blocks.
 *
 * Switches: NR readers, NW writers, ITERS lock/unlock rounds each, SPINS
 * writer spin attempts, RSPIN (v5.10 reader spinning instead of stealing),
 * TIMED=<id> (that thread's waits time out), DOWNGRADE, HANDOFF_TIMER (0:
 * waiters never expire), and BUG_LOST_WAKEUP: the park protocol before
 * commit 6879ce1 (any waker that sees `blocked` set claims the sleeper),
 * which spin must find to hang. */

#ifndef NR
#define NR 1
#endif
#ifndef NW
#define NW 2
#endif
#ifndef ITERS
#define ITERS 1
#endif
#ifndef SPINS
#define SPINS 1
#endif
#ifndef TIMED
#define TIMED 255
#endif
#ifndef HANDOFF_TIMER
#define HANDOFF_TIMER 1
#endif
#define NT (NR + NW)
#define NONE 255

/* mark_wake() types (RWSEM_WAKE_*) */
#define ANY 0
#define READERS 1
#define READ_OWNED 2

/* --- the lock --- */
bit WL;          /* count: WRITER_LOCKED */
bit WAITERS;     /* count: WAITERS */
bit HANDOFF;     /* count: HANDOFF */
byte RC;         /* count: reader biases */
bit ownerR;      /* owner: READER_OWNED hint */
bit wlock;       /* waitq bit 0: the wait_lock */
byte q[NT];      /* wait queue, q[0] first; under wlock */
byte qlen;

/* --- waiter records (one per thread: a thread waits on one lock) --- */
bit isreader[NT];
bit hset[NT];    /* Waiter.handoff_set */
bit task[NT];    /* Waiter.task != nullptr: a reader not yet granted */
bit expired[NT]; /* now_ns() > Waiter.timeout */

/* --- ThreadSlot and the kernel's futex queue on it --- */
byte park[NT];
byte blocked[NT];  /* 0, or sleep_token(seen) = seen + 1 */
bit fsleep[NT];    /* queued in futex_wait on park[t] */

/* --- fork (-DFORK=<id>): thread <id> forks; the others do not survive --- */
#ifdef FORK
byte gen;          /* thread_registry::g_fork_generation */
byte wgen[NT];     /* Waiter.generation */
bit forked;        /* the model is now the child */
bit excused;       /* at the fork, a thread that did not survive held the
                      lock, a reader bias or the wait_lock: the child may
                      legitimately block on it (as on glibc) */
bit fdone;         /* the forking thread finished in the child */
pid fork_pid = 255;
byte wlgen;        /* fork generation of the wait_lock holder (the tag) */
#ifdef BUG_NO_GHOST_SKIP
#define GHOST(t) 0     /* mutant: ghost waiters treated as live */
#else
#define GHOST(t) (wgen[t] != gen)
#endif
#else
#define GHOST(t) 0
#endif

/* --- observers --- */
byte in_w;       /* writers in a critical section */
byte in_r;       /* readers in a critical section */
byte done;       /* threads that finished */

#define QUEUE_OK (WAITERS == (qlen > 0) && (!HANDOFF || WAITERS))
/* The handoff rule, checked at each acquisition by thread `t`. */
#define HANDOFF_OK(t) (!(HANDOFF && qlen > 0 && hset[q[0]]) || q[0] == t)

#if defined(FORK) && defined(WAITLOCK_RECOVER)
/* WaitList::lock() with recover(): a wait_lock held under an older fork
 * generation belongs to a lost thread; take it over with an empty list and
 * clear WAITERS and HANDOFF (every waiter it guarded is a ghost too). */
inline wl_lock() {
  atomic {
    if
    :: wlock == 0 -> wlock = 1; wlgen = gen
    :: wlock == 1 && wlgen != gen ->
       wlgen = gen; WAITERS = 0; HANDOFF = 0;
       do
       :: qlen > 0 -> assert(GHOST(q[qlen - 1])); qlen--; q[qlen] = 0
       :: else -> break
       od
    fi;
    assert(QUEUE_OK)
  }
}
#else
inline wl_lock() {
  atomic { wlock == 0 -> wlock = 1; assert(QUEUE_OK) }
}
#endif
inline wl_unlock() {
  atomic { assert(QUEUE_OK); wlock = 0 }
}

/* Unlink thread x from the queue (WaitList::remove). */
inline q_remove(x) {
  d_step {
    i = 0;
    do
    :: q[i] == x -> break
    :: else -> i++
    od;
    do
    :: i + 1 < qlen -> q[i] = q[i + 1]; i++
    :: else -> break
    od;
    qlen--;
    q[qlen] = 0
  }
}

inline q_add(x, rd) {
  d_step {
    q[qlen] = x; qlen++;
#ifdef FORK
    wgen[x] = gen;
#endif
    isreader[x] = rd; task[x] = rd; hset[x] = 0; expired[x] = 0
  }
}

/* rwsem_del_waiter() */
inline del_waiter(x) {
  q_remove(x);
  if
  :: qlen == 0 -> atomic { WAITERS = 0; HANDOFF = 0 }
  :: else -> skip
  fi
}

/* rwsem_first_waiter(), unlinking ghosts at the head first (first_live()):
 * sets `first`, NONE when the queue is empty. wait_lock held. */
inline first_live() {
#ifdef FORK
  do
  :: qlen > 0 && GHOST(q[0]) -> g = q[0]; del_waiter(g)
  :: else -> break
  od;
#endif
  if
  :: qlen > 0 -> first = q[0]
  :: else -> first = NONE
  fi
}

/* A waiter's timeout passes at any moment (and stays passed). */
inline maybe_expire(x) {
  if
  :: HANDOFF_TIMER && !expired[x] -> expired[x] = 1
  :: true -> skip
  fi
}

/* futex_wake(&park[s], 1) */
inline futex_wake(s) {
  fsleep[s] = 0
}

/* wake_parked(): bump, then claim the sleeper only if this bump moved park
 * away from the value it sleeps on (the fix of 6879ce1). */
inline wake_parked(s) {
  atomic { before = park[s]; park[s]++; assert(park[s] != 0) }
#ifdef BUG_LOST_WAKEUP
  atomic {
    if
    :: blocked[s] != 0 -> blocked[s] = 0; dw = 1
    :: else -> dw = 0
    fi
  }
#else
  atomic {
    if
    :: blocked[s] == before + 1 -> blocked[s] = 0; dw = 1
    :: else -> dw = 0
    fi
  }
#endif
  if
  :: dw -> futex_wake(s)
  :: else -> skip
  fi
}

/* WakeQ::wake(), after the wait_lock is dropped */
inline wake_all() {
  k = 0;
  do
  :: k < NT ->
     if
     :: wq[k] -> wq[k] = 0; wake_parked(k)
     :: else -> skip
     fi;
     k++
  :: else -> break
  od
}

/* park_sleep(me, seen): publish the token, futex-wait, clear. */
inline park_sleep() {
#ifdef BUG_LOST_WAKEUP
  blocked[me] = 1;
#else
  blocked[me] = seen + 1;
#endif
  atomic {
    if
    :: park[me] == seen -> fsleep[me] = 1
    :: else -> skip       /* EAGAIN */
    fi
  }
  if
  :: fsleep[me] == 0 -> skip                         /* woken, or never slept */
  :: atomic { me == TIMED && fsleep[me] == 1 -> fsleep[me] = 0; timed_out = 1 }  /* ETIMEDOUT */
  fi;
  blocked[me] = 0
}

/* rwsem_mark_wake() — wait_lock held */
inline mark_wake(type) {
  first_live();
  if
  :: first == NONE -> skip
  :: else ->
     if
     :: !isreader[first] ->
        if
        :: type == ANY -> wq[first] = 1
        :: else -> skip
        fi
     :: else ->
        pre = 0; aborted = 0;
        if
        :: type != READ_OWNED ->
           pre = 1;
           atomic { oWL = WL; oHO = HANDOFF; RC++; assert(oWL || HANDOFF_OK(first)) }
           if
           :: oWL ->  /* reader_handoff(): undo, maybe ask for HANDOFF */
              maybe_expire(first);
              atomic {
                RC--;
                if
                :: expired[first] -> hset[first] = 1;
                   if
                   :: !oHO -> HANDOFF = 1
                   :: else -> skip
                   fi
                :: else -> skip
                fi
              }
              aborted = 1
           :: else -> ownerR = 1
           fi
        :: else -> skip
        fi;
        if
        :: !aborted ->
           /* collect_readers(): every queued reader, in order */
           d_step {
             woken = 0; i = 0;
             do
             :: i < qlen && GHOST(q[i]) ->   /* ghosts are dropped */
                j = i;
                do
                :: j + 1 < qlen -> q[j] = q[j + 1]; j++
                :: else -> break
                od;
                qlen--; q[qlen] = 0
             :: i < qlen && !GHOST(q[i]) && isreader[q[i]] ->
                gr[q[i]] = 1; woken++;
                j = i;
                do
                :: j + 1 < qlen -> q[j] = q[j + 1]; j++
                :: else -> break
                od;
                qlen--; q[qlen] = 0
             :: i < qlen && !GHOST(q[i]) && !isreader[q[i]] -> i++
             :: else -> break
             od
           }
           /* one count update for all grants and flags */
           atomic {
             RC = RC + woken - pre;
             if
             :: qlen == 0 -> WAITERS = 0; HANDOFF = 0
             :: qlen > 0 && woken > 0 -> HANDOFF = 0
             :: else -> skip
             fi
           }
           /* publish each grant (task = nullptr, release), then queue the wake */
           k = 0;
           do
           :: k < NT ->
              if
              :: gr[k] -> gr[k] = 0; task[k] = 0; wq[k] = 1
              :: else -> skip
              fi;
              k++
           :: else -> break
           od
        :: else -> skip
        fi
     fi
  fi
}

/* rwsem_cond_wake_waiter(), on the count value cWL/cRC */
inline cond_wake_waiter() {
  if
  :: cWL -> skip
  :: !cWL && cRC > 0 -> mark_wake(READERS)
  :: !cWL && cRC == 0 -> mark_wake(ANY)
  fi
}

/* rwsem_del_wake_waiter() — wait_lock held */
inline del_wake_waiter(x) {
  first_live();
  isfirst = (first == x);
  del_waiter(x);
  if
  :: qlen > 0 && isfirst -> mark_wake(ANY)
  :: else -> skip
  fi
}

/* rwsem_wake() / rwsem_downgrade_wake() */
inline wake_queue(type) {
  wl_lock();
  mark_wake(type);
  wl_unlock();
  wake_all()
}

/* rwsem_try_write_lock() — wait_lock held; sets got */
inline try_write_lock() {
  first_live();
  atomic {
    got = 0;
    if
    :: HANDOFF && hset[first] && me != first -> skip
    :: else ->
       if
       :: WL || RC > 0 ->
          if
          :: HANDOFF -> skip
          :: else ->
             if
             :: HANDOFF_TIMER -> expired[me] = 1; HANDOFF = 1; hset[first] = 1
             :: !expired[me] -> skip
             fi
          fi
       :: else ->
          assert(HANDOFF_OK(me));
          WL = 1; HANDOFF = 0;
          if
          :: qlen == 1 -> WAITERS = 0
          :: else -> skip
          fi;
          got = 1
       fi
    fi
  }
  if
  :: got -> q_remove(me); ownerR = 0
  :: else -> skip
  fi
}

/* rwsem_try_write_lock_unqueued(): spinner / trylock; sets got */
inline write_trylock_unqueued() {
  atomic {
    if
    :: !WL && RC == 0 && !HANDOFF -> WL = 1; got = 1
    :: else -> got = 0
    fi
  }
}

#ifdef RSPIN
/* v5.10 rwsem_try_read_lock_unqueued(); sets got */
inline read_trylock_unqueued() {
  got = 0;
  if
  :: !WL && !HANDOFF ->
     atomic { cWL = WL; cHO = HANDOFF; RC++ }
     if
     :: !cWL && !cHO -> got = 1; ownerR = 1
     :: else -> RC--   /* back out; release */
     fi
  :: else -> skip
  fi
}
#endif

#ifdef FORK
/* fork() by thread FORK while it holds nothing (hr = hw = 0) or holds the
 * lock: the other threads stop for good, the generation moves on. */
inline maybe_fork(hr, hw) {
  if
  :: me == FORK && !forked ->
     atomic {
       forked = 1; gen++;
#ifdef WAITLOCK_RECOVER
       excused = (RC > hr) || (WL && !hw)
#else
       excused = (RC > hr) || (WL && !hw) || wlock
#endif
     }
  :: true -> skip
  fi
}
#define FORK_HERE(hr, hw) maybe_fork(hr, hw)
/* rounds of the forking thread (it forks at the start of one, or inside) */
#ifndef FORK_ITERS
#define FORK_ITERS ITERS
#endif
#define MYITERS (me == FORK -> FORK_ITERS : ITERS)
#define FORK_PID(t, p) if :: t == FORK -> fork_pid = p :: else -> skip fi
#else
#define FORK_HERE(hr, hw) skip
#define MYITERS ITERS
#define FORK_PID(t, p) skip
#endif

proctype T(byte me; bit reader)
#ifdef FORK
  provided (!forked || _pid == fork_pid)
#endif
{
  byte it, i, j, k, g, first, woken, seen, before, spins;
  bit got, dw, pre, aborted, oWL, oHO, cWL, cWA, cHO, isfirst, timed_out, have_bias;
  byte cRC;
  bit wq[NT];   /* WakeQ */
  bit gr[NT];   /* granted chain of one mark_wake */

  it = 0;
  do
  :: it == MYITERS -> break
  :: it < MYITERS ->
     it++;
     timed_out = 0;
     FORK_HERE(0, 0);
     if
     :: reader ->
        /* ---- down_read ---- */
        atomic { RC++; cWL = WL; cWA = WAITERS; cHO = HANDOFF; cRC = RC;
                 assert(cWL || cWA || cHO || HANDOFF_OK(me)) }
        if
        :: !cWL && !cWA && !cHO -> ownerR = 1; goto rcs
        :: else -> skip
        fi;
        have_bias = 1;
#ifdef RSPIN
        /* read_spin(): drop the bias, spin (trylocks), wake readers behind */
        atomic { RC--; have_bias = 0 }
        spins = 0;
        do
        :: spins < SPINS ->
           spins++;
           read_trylock_unqueued();
           if
           :: got ->
              if
              :: WAITERS -> wake_queue(READ_OWNED)
              :: else -> skip
              fi;
              goto rcs
           :: else -> skip
           fi
        :: true -> break
        od;
        /* one retry in a new reader phase (rwsem_reader_phase_trylock) */
        if
        :: ownerR -> read_trylock_unqueued();
           if
           :: got -> goto rcs
           :: else -> skip
           fi
        :: true -> skip
        fi;
#else
        /* read_steal() on the count the fast path saw */
        if
        :: ownerR && cRC > 1 && !cWL -> skip     /* very likely reader-owned */
        :: else ->
           if
           :: !cWL && !cHO ->
              ownerR = 1;
              if
              :: cRC == 1 && cWA -> wake_queue(READ_OWNED)
              :: else -> skip
              fi;
              goto rcs
           :: else -> skip
           fi
        fi;
#endif
        /* ---- read_queue ---- */
        wl_lock();
        cWA = 0;  /* adjustment += WAITERS */
        if
        :: qlen == 0 ->
           if
           :: have_bias && !WL -> wl_unlock(); ownerR = 1; goto rcs
           :: else -> cWA = 1
           fi
        :: else -> skip
        fi;
        q_add(me, 1);
        atomic {
          if
          :: have_bias -> RC--
          :: else -> skip
          fi;
          if
          :: cWA -> WAITERS = 1
          :: else -> skip
          fi;
          cWL = WL; cRC = RC
        }
        cond_wake_waiter();
        wl_unlock();
        wake_all();
        /* ---- read_wait ---- */
        do
        :: seen = park[me];
           if
           :: task[me] == 0 -> break
           :: else ->
              if
              :: timed_out ->
                 wl_lock();
                 if
                 :: task[me] == 0 -> wl_unlock(); break   /* granted meanwhile */
                 :: else ->
                    del_wake_waiter(me);
                    wl_unlock();
                    wake_all();
                    goto next        /* ETIMEDOUT */
                 fi
              :: else -> park_sleep()
              fi
           fi
        od;
rcs:    /* ---- read critical section ---- */
        atomic { in_r++; assert(in_w == 0 && WL == 0 && RC >= in_r) }
        FORK_HERE(1, 0);
        atomic { in_r-- }
        /* ---- up_read ---- */
        atomic { RC--; cWL = WL; cRC = RC; cWA = WAITERS }
        if
        :: !cWL && cRC == 0 && cWA -> wake_queue(ANY)
        :: else -> skip
        fi
     :: else ->
        /* ---- down_write ---- */
        atomic {
          if
          :: !WL && RC == 0 && !WAITERS && !HANDOFF -> WL = 1; got = 1
          :: else -> got = 0
          fi
        }
        if
        :: got -> ownerR = 0; goto wcs
        :: else -> skip
        fi;
        /* optimistic spinning, reduced to its trylock attempts */
        spins = 0;
        do
        :: spins < SPINS ->
           spins++;
           write_trylock_unqueued();
           if
           :: got -> ownerR = 0; goto wcs
           :: else -> skip
           fi
        :: true -> break
        od;
        /* ---- write_queue ---- */
        wl_lock();
        q_add(me, 0);
        first_live();
        if
        :: first != me ->
           atomic { cWL = WL; cRC = RC }
           cond_wake_waiter();
           k = 0;
           do
           :: k < NT && !wq[k] -> k++
           :: else -> break
           od;
           if
           :: k < NT -> wl_unlock(); wake_all(); wl_lock()
           :: else -> skip
           fi
        :: else -> WAITERS = 1
        fi;
        do
        :: seen = park[me];
           try_write_lock();
           if
           :: got -> break
           :: else -> skip
           fi;
           wl_unlock();
           if
           :: timed_out ->
              wl_lock();
              del_wake_waiter(me);
              wl_unlock();
              wake_all();
              goto next              /* ETIMEDOUT */
           :: else -> skip
           fi;
           if
           :: hset[me] -> skip       /* handoff_spin() saw the owner go */
           :: true -> park_sleep()
           fi;
           wl_lock()
        od;
        wl_unlock();
wcs:    /* ---- write critical section ---- */
        atomic { in_w++; assert(in_w == 1 && in_r == 0 && WL == 1) }
        FORK_HERE(0, 1);
        atomic { in_w-- }
#ifdef DOWNGRADE
        if
        :: true ->
           /* downgrade_write(): count += BIAS - WRITER, wake queued readers */
           atomic { cWA = WAITERS; RC++; WL = 0 }
           ownerR = 1;
           if
           :: cWA -> wake_queue(READ_OWNED)
           :: else -> skip
           fi;
           atomic { in_r++; assert(in_w == 0) }
           atomic { in_r-- }
           atomic { RC--; cWL = WL; cRC = RC; cWA = WAITERS }
           if
           :: !cWL && cRC == 0 && cWA -> wake_queue(ANY)
           :: else -> skip
           fi;
           goto next
        :: true -> skip
        fi;
#endif
        /* ---- up_write ---- */
        ownerR = 0;
        atomic { cWA = WAITERS; WL = 0 }
        if
        :: cWA -> wake_queue(ANY)
        :: else -> skip
        fi
     fi;
next: skip
  od;
#ifdef FORK
  if
  :: forked -> fdone = 1
  :: else -> skip
  fi;
#endif
  done++
}

#ifdef FORK
/* Run with pan -E: threads that did not survive the fork never reach their
 * end. `timeout` is taken only when nothing else can move: then everyone
 * must be done (no fork), or the child must be done unless a lost thread
 * held the lock, a bias or the wait_lock at the fork. */
active proctype watch() {
  timeout -> assert(done == NT || (forked && (fdone || excused)))
}
#endif

init {
  byte t;
  pid p;
  atomic {
    t = 0;
    do
    :: t < NR -> p = run T(t, 1); FORK_PID(t, p); t++
    :: t >= NR && t < NT -> p = run T(t, 0); FORK_PID(t, p); t++
    :: else -> break
    od
  }
  done == NT;
  /* everyone finished: the lock is free, nobody queued, nobody asleep */
  assert(RC == 0 && WL == 0 && WAITERS == 0 && HANDOFF == 0 && qlen == 0 && wlock == 0);
  assert(in_r == 0 && in_w == 0)
}
