/* tests/model/lockref_rwlock.pml — core/lockref_rwlock.h (LockrefRwlock),
 * checked exhaustively with spin.
 *
 * The one 64-bit word: C (readers inside, the count half and its futex) and
 * the lock half (its own futex, compared as a whole): W (kWriter), RL
 * (kReaderLock), RS/WS (kReaderSleepers/kWriterSleepers), D (kDrainer), RT
 * (kReadTurn). Every RMW of the word is one atomic step; a CAS loop is one
 * step per attempt, and "the retries ran out" (LoopResult::exhausted) may
 * happen at any attempt, which covers every contention pattern. Polling
 * before a sleep is a nondeterministic choice between polling again and
 * going to sleep. The read turn's ~1 ms bound is a per-writer timer that may
 * expire at any moment once started (and the futex wait bounded by it may
 * time out at any moment).
 *
 * Modelled: read_lock (try_enter, read_fallback, read_slow), write_lock
 * (idle CAS, write_slow with the read turn, sleep_read_turn), drain (both
 * sleeps), read_unlock, write_unlock; -DWP: the writer-preferring kind.
 * Not modelled: recursive readers, trylock/timed callers, kMaxReaders.
 * Mutant -DBUG_NO_DRAIN_WAKE: the last reader out does not wake a sleeping
 * drainer; spin must find the writer that sleeps for ever.
 *
 * Properties: mutual exclusion; while a writer is inside, the count is 0
 * and kWriter set; no lost wakeup (a thread asleep forever with nobody to wake it
 * leaves the system stuck: invalid end state); at the end the lock is free. */

#ifndef NR
#define NR 2
#endif
#ifndef NW
#define NW 1
#endif
#ifndef ITERS
#define ITERS 1
#endif
#define NT (NR + NW)
#ifdef WP
#define WPK 1
#else
#define WPK 0
#endif

byte CNT;
bit WRT, RLK, RSL, WSL, DRN, TURN;
#define HIGH (WRT + 2 * RLK + 4 * RSL + 8 * WSL + 16 * DRN + 32 * TURN)

bit lsleep[NT];   /* in futex_wait on the lock half */
bit csleep[NT];   /* in futex_wait on the count half */

byte in_r, in_w, done;

/* wp_blocks(w, wp) and reader_blocked() on a snapshot (sW, sRL, sWS, sRT) */
#define WP_BLOCKS(sWS, sRT) (WPK && sWS && !sRT)
#define READER_BLOCKED(sW, sRL, sWS, sRT) (sW || sRL || WP_BLOCKS(sWS, sRT))

inline wake_lock_half() {  /* futex_wake(lock half, all) */
  atomic { k = 0; do :: k < NT -> lsleep[k] = 0; k++ :: else -> break od; k = 0 }
}
inline wake_count_half() { /* futex_wake(count half, 1): only a drainer sleeps there */
  atomic { k = 0; do :: k < NT -> csleep[k] = 0; k++ :: else -> break od; k = 0 }
}

/* futex_wait(lock half, hv): sleeps only while the half still reads hv */
inline lock_half_wait(hv) {
  atomic {
    if
    :: HIGH == hv -> lsleep[me] = 1
    :: else -> skip
    fi
  }
  lsleep[me] == 0
}

/* write_unlock(false) — also how a writer gives back a fresh kWriter */
inline write_unlock() {
  atomic {
    oRS = RSL; oWS = WSL;
    WRT = 0; DRN = 0; RSL = 0; WSL = 0;
    if
    :: oRS && !(WPK && oWS) -> TURN = 1
    :: else -> skip
    fi
  }
  if
  :: oRS || oWS -> wake_lock_half()
  :: else -> skip
  fi
}

/* try_enter(): e := 0 entered, 1 blocked, 3 exhausted; snapshot in s* */
inline try_enter() {
  do
  :: atomic {
       sW = WRT; sRL = RLK; sWS = WSL; sRT = TURN;
       if
       :: !sW && !sRL && !WP_BLOCKS(sWS, sRT) ->
          CNT++;
          if
          :: sRT -> TURN = 0; WSL = 0
          :: else -> skip
          fi;
          e = 0
       :: !sW && !sRL && WP_BLOCKS(sWS, sRT) -> e = 1   /* stopped */
       :: sW || sRL -> e = 1                            /* locked */
       :: !sW && !sRL -> e = 3                          /* retries ran out */
       fi
     };
     break
  od;
  if
  :: e == 0 && sRT && sWS -> wake_lock_half()
  :: else -> skip
  fi
}

/* read_fallback() */
inline read_fallback() {
  atomic { sRL = RLK; sW = WRT; sWS = WSL; sRT = TURN; RLK = 1 }
  if
  :: sRL -> e = 1
  :: else ->
     if
     :: sW || WP_BLOCKS(sWS, sRT) -> e = 1
     :: else -> CNT++; e = 0
     fi;
     atomic {
       oRS = RSL; oWS = WSL;
       RLK = 0; RSL = 0; WSL = 0;
       if
       :: e == 0 -> TURN = 0
       :: else -> skip
       fi
     }
     if
     :: oRS || oWS -> wake_lock_half()
     :: else -> skip
     fi
  fi;
  atomic { sW = WRT; sRL = RLK; sWS = WSL; sRT = TURN }   /* old = load */
}

proctype T(byte me; bit reader) {
  byte it, k, e, cseen, hv;
  bit sW, sRL, sWS, sRT, oRS, oWS, tstart, texp, turn_over, got, gave_back;

  it = 0;
  do
  :: it == ITERS -> break
  :: it < ITERS ->
     it++;
     if
     :: reader ->
        /* ---- read_lock ---- */
        try_enter();
        do
        :: e == 3 -> read_fallback()
        :: e == 0 -> break
        :: e == 1 ->
           if
           :: true -> skip                              /* poll */
           :: true ->
              atomic { RSL = 1; sW = WRT; sRL = RLK; sWS = WSL; sRT = TURN; hv = HIGH }
              if
              :: READER_BLOCKED(sW, sRL, sWS, sRT) -> lock_half_wait(hv)
              :: else -> skip
              fi
           fi;
           try_enter()
        od;
        atomic { in_r++; assert(in_w == 0 && CNT >= in_r) }
        atomic { assert(in_w == 0); in_r-- }
        /* ---- read_unlock ---- */
        atomic {
          assert(CNT > 0);
          cseen = CNT; sW = DRN; CNT--
        }
#ifndef BUG_NO_DRAIN_WAKE
        if
        :: cseen == 1 && sW -> wake_count_half()
        :: else -> skip
        fi
#endif
     :: else ->
        /* ---- write_lock ---- */
        atomic {
          if
          :: CNT == 0 && HIGH == 0 -> WRT = 1; got = 1
          :: else -> got = 0
          fi
        }
        tstart = 0; texp = 0;
        do
        :: got -> break
        :: !got ->
           gave_back = 0;
           atomic { sW = WRT; sRT = TURN }
           if
           :: !sRT -> tstart = 0; texp = 0; turn_over = 0
           :: sRT ->
              if
              :: !tstart -> tstart = 1; texp = 0
              :: else -> skip
              fi;
              if
              :: texp -> turn_over = 1
              :: !texp -> turn_over = 0
              :: !texp -> texp = 1; turn_over = 1          /* the bound passes now */
              fi
           fi;
           if
           :: !sW && (!sRT || turn_over) ->
              atomic { sW = WRT; sRT = TURN; WRT = 1 }             /* prev = fetch_or(kWriter) */
              if
              :: !sW ->
                 if
                 :: sRT && !turn_over -> write_unlock(); gave_back = 1   /* a read turn just began */
                 :: else ->
                    if
                    :: sRT -> TURN = 0
                    :: else -> skip
                    fi;
                    got = 1
                 fi
              :: else -> skip
              fi
           :: else -> skip
           fi;
           if
           :: got -> skip
           :: gave_back -> skip                                 /* gave it back: go again */
           :: !got && !gave_back ->
              if
              :: true -> skip                                 /* poll */
              :: true ->
                 atomic { WSL = 1; sW = WRT; sRT = TURN; hv = HIGH }
                 if
                 :: !sW && (!sRT || turn_over) -> skip         /* free now: go again */
                 :: sW -> lock_half_wait(hv)
                 :: else ->
                    /* sleep_read_turn(): bounded by the turn's deadline */
                    atomic {
                      if
                      :: HIGH == hv -> lsleep[me] = 1
                      :: else -> skip
                      fi
                    }
                    if
                    :: lsleep[me] == 0 -> skip
                    :: atomic { lsleep[me] == 1 -> lsleep[me] = 0; texp = 1 }   /* timed out */
                    fi
                 fi
              fi
           fi
        od;
        /* ---- drain ---- */
        do
        :: CNT == 0 && !RLK -> break
        :: else ->
           if
           :: true -> skip                                    /* poll */
           :: true ->
              atomic { cseen = CNT; sRL = RLK }
              if
              :: cseen == 0 ->
                 atomic { WSL = 1; cseen = CNT; sRL = RLK; hv = HIGH }
                 if
                 :: cseen == 0 && sRL -> lock_half_wait(hv)
                 :: else -> skip
                 fi
              :: else ->
                 atomic { cseen = CNT; DRN = 1 }
                 if
                 :: cseen != 0 ->
                    atomic {
                      if
                      :: CNT == cseen -> csleep[me] = 1
                      :: else -> skip
                      fi
                    }
                    csleep[me] == 0
                 :: else -> skip
                 fi
              fi
           fi
        od;
        /* kReaderLock may be set here: a fallback reader that saw kWriter
         * and is backing out; the count is 0 and stays 0 */
        atomic { in_w++; assert(in_w == 1 && in_r == 0 && CNT == 0 && WRT) }
        atomic { assert(CNT == 0 && WRT); in_w-- }
        write_unlock()
     fi
  od;
  done++
}

init {
  byte t;
  atomic {
    t = 0;
    do
    :: t < NR -> run T(t, 1); t++
    :: t >= NR && t < NT -> run T(t, 0); t++
    :: else -> break
    od
  }
  done == NT;
  assert(CNT == 0 && !WRT && !RLK && !DRN && in_r == 0 && in_w == 0)
}
