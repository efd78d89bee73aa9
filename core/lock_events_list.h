// core/lock_events_list.h — every lock event lockswap counts, one line each.
//
// X-macro list in the style of the kernel's kernel/locking/lock_events_list.h:
// LOCK_EVENT(name, meaning). The rwsem_* names and meanings are the kernel's,
// so a userspace run reads like /sys/kernel/debug/lock_event_counts.
// Include this file only after defining LOCK_EVENT.

// --- rw_semaphore (core/rwsem.h), kernel names ---
LOCK_EVENT(rwsem_sleep_reader,  "reader sleeps on the wait queue")
LOCK_EVENT(rwsem_sleep_writer,  "writer sleeps on the wait queue")
LOCK_EVENT(rwsem_wake_reader,   "readers granted and woken by a waker")
LOCK_EVENT(rwsem_wake_writer,   "writer woken (it still has to win the lock)")
LOCK_EVENT(rwsem_polite_woken,  "queued writer found the lock free before sleeping, left it to the releaser, woken by its unlock")
LOCK_EVENT(rwsem_polite_timeout, "queued writer found the lock free before sleeping, left it to the releaser, nobody unlocked: retried")
LOCK_EVENT(rwsem_polite_backoff, "queued writer woken by an unlock lost the lock to a thread that did not queue: slept polite_ns unwoken")
LOCK_EVENT(rwsem_wake_awake,    "queued writer not woken: awake already, it re-checks the lock before sleeping")
LOCK_EVENT(rwsem_opt_lock,      "writer took the lock while optimistically spinning")
LOCK_EVENT(rwsem_opt_fail,      "optimistic spin refused or gave up")
LOCK_EVENT(rwsem_opt_nospin,    "reader-owned spin deadline passed: lock marked non-spinnable")
LOCK_EVENT(rwsem_opt_owner_off, "spin refused or stopped: owner or OSQ predecessor not on a CPU (owner_on_cpu() stand-in)")
LOCK_EVENT(rwsem_opt_budget,    "spin stopped: owner_spin_ns spent on a writer or no owner (need_resched() stand-in)")
LOCK_EVENT(rwsem_opt_preempted, "spin stopped: the spinner saw it had been preempted (LOCKSWAP_ONCPU=rseq)")
LOCK_EVENT(rwsem_opt_lost,      "spin stopped: the lock was released and re-taken by another thread before this spinner could take it")
LOCK_EVENT(rwsem_wlock_barge,   "writer took a free lock on entering the slow path, past queued waiters (no HANDOFF)")
LOCK_EVENT(rwsem_yield_woken,   "writer yielded its CPU before barging: the woken head writer had not taken the lock for woken_yield_ns (not in the kernel)")
LOCK_EVENT(rwsem_opt_crowded,   "spin refused: as many threads of the process spin already as it has CPUs minus one")
LOCK_EVENT(rwsem_opt_rlock,     "v5.10: reader took the lock while optimistically spinning")
LOCK_EVENT(rwsem_opt_rlock2,    "v5.10: reader took the lock in a new reader phase after spinning")
LOCK_EVENT(rwsem_opt_norspin,   "v5.10: reader spinning disabled on this lock")
LOCK_EVENT(rwsem_rlock,         "reader acquired after queueing")
LOCK_EVENT(rwsem_rlock_steal,   "reader stole the lock in the slow path")
LOCK_EVENT(rwsem_rlock_writer_poll, "reader polled a running writer owner until it left, then entered (not in the kernel)")
LOCK_EVENT(rwsem_rlock_steal_held, "reader stole a read-held default-kind lock past a queued writer (not in the kernel)")
LOCK_EVENT(rwsem_handoff_timer, "head writer woke at its handoff deadline to set HANDOFF (not in the kernel)")
LOCK_EVENT(rwsem_rlock_fast,    "reader acquired through the empty-queue shortcut")
LOCK_EVENT(rwsem_rlock_fail,    "reader gave up (timeout or trylock)")
LOCK_EVENT(rwsem_rlock_handoff, "reader set the handoff bit")
LOCK_EVENT(rwsem_rlock_recursive, "reader already holding a read lock bypassed writer fairness")
LOCK_EVENT(rwsem_rlock_bias_drop, "2016 option: failed fast-path reader dropped its bias at once")
LOCK_EVENT(rwsem_wlock,         "writer acquired after queueing")
LOCK_EVENT(rwsem_wlock_fail,    "writer gave up (timeout or trylock)")
LOCK_EVENT(rwsem_wlock_handoff, "writer set the handoff bit")
LOCK_EVENT(rwsem_rlock_reader_pref, "default-kind reader entered past queued writers: a read holder sleeps in lockswap")
LOCK_EVENT(rwsem_rlock_reader_pref_wait, "default-kind reader entered past queued writers after the reader-preference bound")
LOCK_EVENT(rwsem_rlock_rt,      "SCHED_FIFO/RR reader above every queued writer entered a read-held lock")
LOCK_EVENT(rwsem_cancel,        "a cancelled thread left the queue, or gave back what it had been granted")
LOCK_EVENT(rwsem_wait_lock_recover, "a wait_lock held by a thread lost in fork() was taken over in the child")

// --- futex reference variant (core/futex_mutex.h, core/futex_rwlock.h) ---
LOCK_EVENT(futex_mutex_sleep,   "futex mutex: lock() slept in the kernel")
LOCK_EVENT(futex_mutex_wake,    "futex mutex: unlock() woke a sleeper")
LOCK_EVENT(futex_rwlock_sleep,  "futex rwlock: an acquisition slept in the kernel")
LOCK_EVENT(futex_rwlock_wake,   "futex rwlock: a release woke sleepers")

// --- condition variables (core/cond.h) ---
LOCK_EVENT(cond_wait,           "condition wait entered")
LOCK_EVENT(cond_timeout,        "condition wait returned ETIMEDOUT")
LOCK_EVENT(cond_signal,         "signal that found waiters")
LOCK_EVENT(cond_broadcast,      "broadcast that found waiters")

// --- concurrency ids (core/cid.h) ---
LOCK_EVENT(cid_alloc,           "concurrency id taken from an id bitmap")
LOCK_EVENT(cid_free,            "global: id given back before a sleep or at thread exit")
LOCK_EVENT(cid_lock_contended,  "allocator lock busy at the first try (global: the shared cid_lock)")
LOCK_EVENT(cid_lock_recovered,  "global: the shared cid_lock taken over from a process that died holding it")
LOCK_EVENT(cid_reclaim,         "id freed for its holder: percpu idle/out-of-range CPU slot, global dead process")
LOCK_EVENT(cid_fallback,        "no id of the chosen kind: rseq unavailable (percpu used) or id space full")
LOCK_EVENT(cid_slow_ns,         "CPU ns in allocator slow paths (1 call in 32 timed, scaled by 32)")
LOCK_EVENT(cid_switch_out,      "switch model: a thread blocked in a wait lockswap sees (global: its id given back)")
LOCK_EVENT(cid_switch_in,       "switch model: a thread resumed from such a wait and took its id (an allocator call)")
LOCK_EVENT(cid_switch_cpu_ns,   "switch model: the process's CPU ns at exit (cid_slow_ns / this = the allocator's CPU share)")

// --- per-CID sharded reader rwlock (core/percid/thread.h) ---
LOCK_EVENT(percid_rlock_slow,   "reader met a writer and waited for it on the rwsem")
LOCK_EVENT(percid_rlock_recursive, "reader holding read locks entered past a pending writer")
LOCK_EVENT(percid_rlock_reader_pref, "default-kind reader entered past a draining writer: a read holder sleeps in lockswap")
LOCK_EVENT(percid_rlock_reader_pref_wait, "default-kind reader entered past a draining writer after the reader-preference bound")
LOCK_EVENT(percid_wlock_sleep,  "writer slept waiting for the readers to drain")
LOCK_EVENT(percid_plain,        "no reader-slot block left: lock runs as a plain rwsem")

// --- WiredTiger's rwlocks (preload/wtlock/, LOCKSWAP_WTLOCK=rwsem|rwsem-rspin); the
// rwsem's own events above count inside them as well ---
LOCK_EVENT(wtlock_init,         "WiredTiger rwlock: __wt_rwlock_init on a swapped lock (words zeroed, nothing allocated)")
LOCK_EVENT(wtlock_read_slow,    "WiredTiger rwlock: a read acquisition left the fast path")
LOCK_EVENT(wtlock_write_slow,   "WiredTiger rwlock: a write acquisition left the fast path")
LOCK_EVENT(wtlock_try_busy,     "WiredTiger rwlock: __wt_try_readlock or __wt_try_writelock returned EBUSY")

// --- thread registry (core/thread_registry.h) ---
LOCK_EVENT(registry_shared_slot, "a thread got no slot of its own (address space exhausted, or no inline key for its exit): it shares one")
LOCK_EVENT(rwsem_shared_wait,   "a thread on the shared slot queued on an rwsem (no spinning, wake-all park)")

// --- objects left to glibc's own algorithm: preload hands robust, PI, PP and
// process-shared objects to glibc; core/sem.h runs a process-shared lockref
// semaphore on glibc's word (FutexSem) ---
LOCK_EVENT(delegated_to_glibc,  "robust/PI/PP/process-shared object handed to glibc")

// --- lockref (core/lockref.h, core/lockref_rwlock.h, core/sem.h) ---
LOCK_EVENT(lockref_lockless,    "update done by the bounded lock-free compare-and-swap loop")
LOCK_EVENT(lockref_cas_fail,    "a lock-free compare-and-swap lost a race and was retried")
LOCK_EVENT(lockref_fallback,    "retry bound reached: the update was done under the lock half")
LOCK_EVENT(lockref_lock_sleep,  "lockref lock half: lock() slept in the kernel")
LOCK_EVENT(lockref_rlock_sleep, "lockref rwlock: a reader slept on the lock half")
LOCK_EVENT(lockref_rlock_recursive, "lockref rwlock: a reader holding read locks entered past a writer")
LOCK_EVENT(lockref_rlock_reader_pref, "lockref rwlock: a reader entered a read-held lock past a draining writer (reader preference)")
LOCK_EVENT(lockref_wlock_sleep, "lockref rwlock: a writer slept on the lock half")
LOCK_EVENT(lockref_drain_sleep, "lockref rwlock: a writer slept on the count half until readers drained")
LOCK_EVENT(lockref_read_turn,   "lockref rwlock: a write unlock found sleeping readers and gave them the next turn")
LOCK_EVENT(lockref_read_turn_expired, "lockref rwlock: a writer waited out the readers' turn and ended it")
LOCK_EVENT(lockref_rw_wake,     "lockref rwlock: a release woke the lock-half sleepers")
LOCK_EVENT(sem_wait_sleep,      "a semaphore wait slept on the futex")
LOCK_EVENT(sem_post_wake,       "a post woke a semaphore sleeper")

// --- per-lock profiler (preload/stats/stats.cpp, LOCKSWAP_STATS=profile) ---
LOCK_EVENT(stats_lock_untracked, "profile: acquisition of a lock the statistics table had no room for (not profiled)")
LOCK_EVENT(stats_site_untracked, "profile: acquisition at a call site the statistics table had no room for")

// --- wait accounting (core/wait_ctx.h, core/rwsem/spinning.h): where the
// time of lockswap's own waits went, per API family. Each futex sleep
// through WaitCtx adds its wall ns and a count; `internal` is lockswap's own
// sleeps outside any call's family (an id allocator's lock) ---
LOCK_EVENT(wait_mutex_ns,       "wait: ns slept in the kernel by mutex acquisitions")
LOCK_EVENT(wait_mutex_n,        "wait: futex sleeps of mutex acquisitions")
LOCK_EVENT(wait_rwlock_ns,      "wait: ns slept in the kernel by rwlock acquisitions")
LOCK_EVENT(wait_rwlock_n,       "wait: futex sleeps of rwlock acquisitions")
LOCK_EVENT(wait_cond_ns,        "wait: ns slept in the kernel by condition waits (the mutex re-take counts as mutex)")
LOCK_EVENT(wait_cond_n,         "wait: futex sleeps of condition waits")
LOCK_EVENT(wait_sem_ns,         "wait: ns slept in the kernel by semaphore waits")
LOCK_EVENT(wait_sem_n,          "wait: futex sleeps of semaphore waits")
LOCK_EVENT(wait_internal_ns,    "wait: ns slept in the kernel by lockswap's own sleeps of no call's family")
LOCK_EVENT(wait_internal_n,     "wait: lockswap's own futex sleeps of no call's family")
LOCK_EVENT(spin_mutex_ns,       "wait: ns a mutex acquisition spun (rwsem optimistic, handoff spin) before it took the lock or slept")
LOCK_EVENT(spin_rwlock_ns,      "wait: ns an rwlock acquisition spun (rwsem optimistic, handoff spin, reader polls)")
