/* tests/model/sem.pml — the POSIX semaphore protocol of core/sem.h
 * (Semaphore<FutexSemWord> and, with -DLOCKREF, Semaphore<LockrefSemWord>),
 * checked exhaustively with spin.
 *
 * The word: V (value, the low half and its futex) and the high half: NWT
 * (nwaiters), and with LOCKREF the lock half LK (kLocked) / LS
 * (kLockSleepers), whose futex compares the whole high half. Every RMW is one
 * atomic step, every CAS attempt one step; with LOCKREF a lock-free loop may
 * run out of retries at any attempt (LoopResult::exhausted) and then takes or
 * gives the unit under the lock half (take_locked/give_locked, and
 * core/lockref.cpp's lock_half_slow: spin, then sleep with both bits set).
 * futex_wake(1) wakes any one sleeper (a nondeterministic choice).
 *
 * Threads: NP posters (one sem_post each) and NWAIT waiters (one sem_wait
 * each). -DTIMED=<id>: that waiter's sleeps may time out (ETIMEDOUT: it
 * unregisters). -DCANCEL=<id>: that waiter may be cancelled each time its
 * futex sleep returns (the Registration guard unregisters and passes on a
 * wakeup it may have absorbed). Mutant -DBUG_NO_PASS_ON: unregistering never
 * passes a wakeup on; spin must find the sleeper that then sleeps forever.
 *
 * Properties, checked when nothing can move any more (spin's `timeout`; run
 * with pan -E, since waiters beyond the posted units legitimately sleep for
 * ever): no lost wakeup — no waiter asleep on the value while units are left,
 * nobody asleep on the lock half while it is free, every poster done; units
 * are conserved (value + units taken = posts); nwaiters counts exactly the
 * waiters still asleep; the lock half is free. */

#ifndef NP
#define NP 1
#endif
#ifndef NWAIT
#define NWAIT 2
#endif
#ifndef TIMED
#define TIMED 255
#endif
#ifndef CANCEL
#define CANCEL 255
#endif
#define NT (NP + NWAIT)
#define MAXT 4
#ifdef LOCKREF
#define LR 1
#else
#define LR 0
#endif

#define DONE 0
#define STOPPED 1
#define LOCKED 2
#define EXHAUSTED 3

byte V;           /* value */
byte NWT;         /* nwaiters */
bit LK, LS;       /* lockref lock half: kLocked, kLockSleepers */
#define HIGH (LK + 2 * LS + 4 * NWT)

bit vsleep[MAXT]; /* futex_wait on the value half */
bit lsleep[MAXT]; /* futex_wait on the lock half */

byte taken, done, pdone;

/* futex_wake(word, 1): any one sleeper, if there is one */
#define WAKE_ONE(arr) \
  atomic { \
    if \
    :: NT > 0 && arr[0] -> arr[0] = 0 \
    :: NT > 1 && arr[1] -> arr[1] = 0 \
    :: NT > 2 && arr[2] -> arr[2] = 0 \
    :: NT > 3 && arr[3] -> arr[3] = 0 \
    :: else -> skip \
    fi \
  }

/* lockref::lock_half() / lock_half_slow() */
inline lock_half() {
  atomic { o = LK; LK = 1 }
  if
  :: !o -> skip
  :: o ->
     do
     :: true ->                    /* spin: poll and try again */
        atomic { !LK -> o = LK; LK = 1 }
        if
        :: !o -> break
        :: else -> skip
        fi
     :: true -> break
     od;
     do
     :: !o -> break
     :: o ->
        atomic { o = LK; LK = 1; LS = 1; hv = HIGH }
        if
        :: !o -> break
        :: else ->
           atomic {
             if
             :: HIGH == hv -> lsleep[me] = 1
             :: else -> skip       /* EAGAIN: an unlock, or nwaiters moved */
             fi
           }
           lsleep[me] == 0
        fi
     od
  fi
}

/* lockref::unlock_half() */
inline unlock_half() {
  atomic { o = LS; LK = 0; LS = 0 }
  if
  :: o -> WAKE_ONE(lsleep)
  :: else -> skip
  fi
}

/* Word::try_take(d, also): took := 1 if a unit was taken (and `also`
 * registrations dropped in the same step) */
inline try_take(also) {
  took = 0;
  if
  :: !LR ->
     atomic {
       if
       :: V > 0 -> V--; NWT = NWT - also; took = 1
       :: else -> skip
       fi
     }
  :: LR ->
     atomic {
       if
       :: LK -> r = LOCKED; ov = V
       :: !LK && V == 0 -> r = STOPPED; ov = 0
       :: !LK && V > 0 -> V--; NWT = NWT - also; r = DONE; took = 1
       :: !LK && V > 0 -> r = EXHAUSTED; ov = V
       fi
     }
     if
     :: r == DONE || r == STOPPED || ov == 0 -> skip
     :: else ->                               /* take_locked() */
        lock_half();
        atomic {
          if
          :: V > 0 -> V--; NWT = NWT - also; took = 1
          :: else -> skip
          fi
        }
        unlock_half()
     fi
  fi
}

/* Word::give(): on = nwaiters in the word it replaced */
inline give() {
  if
  :: !LR -> atomic { on = NWT; V++ }
  :: LR ->
     atomic {
       if
       :: LK -> r = LOCKED
       :: !LK -> on = NWT; V++; r = DONE
       :: !LK -> r = EXHAUSTED
       fi
     }
     if
     :: r == DONE -> skip
     :: else ->                               /* give_locked() */
        lock_half();
        atomic { on = NWT; V++ }
        unlock_half()
     fi
  fi
}

/* Semaphore::unregister() */
inline unregister() {
  atomic { ov = V; on = NWT; NWT-- }
#ifndef BUG_NO_PASS_ON
  if
  :: ov != 0 && on > 1 -> WAKE_ONE(vsleep)
  :: else -> skip
  fi
#endif
}

proctype P(byte me) {
  bit o, took;
  byte r, ov, on, hv;
  give();
  if
  :: on != 0 -> WAKE_ONE(vsleep)             /* sem_post: wake one */
  :: else -> skip
  fi;
  pdone++;
  done++
}

proctype Wt(byte me) {
  bit o, took, gone;
  byte r, ov, on, hv;
  try_take(0);
  if
  :: took -> goto got
  :: else -> skip
  fi;
  /* wait_slow() */
  NWT++;
  do
  :: try_take(1);
     if
     :: took -> goto got
     :: else -> skip
     fi;
     atomic {
       if
       :: V == 0 -> vsleep[me] = 1
       :: else -> skip                      /* EAGAIN */
       fi
     }
     gone = 0;
     if
     :: vsleep[me] == 0 -> skip
     :: atomic { me == TIMED && vsleep[me] == 1 -> vsleep[me] = 0; gone = 1 }   /* ETIMEDOUT */
     fi;
     if
     :: me == CANCEL -> gone = 1            /* cancelled at the sleep's return */
     :: true -> skip
     fi;
     if
     :: gone -> unregister(); goto out
     :: else -> skip
     fi
  od;
got:
  taken++;
out:
  done++
}

active proctype watch() {
  byte k, asleep;
  timeout ->
  atomic {
    k = 0; asleep = 0;
    do
    :: k < MAXT ->
       assert(!(vsleep[k] && V > 0));        /* asleep with a unit left */
       assert(!(lsleep[k] && !LK));          /* asleep on a free lock half */
       asleep = asleep + vsleep[k];
       k++
    :: else -> break
    od;
    assert(V + taken == NP && NWT == asleep && !LK && !LS && pdone == NP)
  }
}

init {
  byte t;
  atomic {
    t = 0;
    do
    :: t < NWAIT -> run Wt(t); t++
    :: t >= NWAIT && t < NT -> run P(t); t++
    :: else -> break
    od
  }
  done == NT
}
