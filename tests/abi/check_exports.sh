#!/bin/bash
# tests/abi/check_exports.sh <nm> <liblockswap.so>
#
# The dynamic symbol table of liblockswap.so must export every interposed
# pthread / C11 / semaphore function (and pthread_setcanceltype), nothing else except glibc's __pthread_mutex_* /
# __pthread_rwlock_* compatibility aliases (no leaked C++ or core symbols),
# all as functions and all unversioned (plain names, no @VERSION).
set -u
nm=${1:?usage: check_exports.sh <nm> <library>}
lib=${2:?usage: check_exports.sh <nm> <library>}

required=(
  pthread_mutex_init pthread_mutex_destroy pthread_mutex_lock pthread_mutex_trylock
  pthread_mutex_timedlock pthread_mutex_clocklock pthread_mutex_unlock pthread_mutex_consistent
  pthread_rwlock_init pthread_rwlock_destroy pthread_rwlock_rdlock pthread_rwlock_tryrdlock
  pthread_rwlock_timedrdlock pthread_rwlock_clockrdlock pthread_rwlock_wrlock pthread_rwlock_trywrlock
  pthread_rwlock_timedwrlock pthread_rwlock_clockwrlock pthread_rwlock_unlock
  pthread_cond_init pthread_cond_destroy pthread_cond_wait pthread_cond_timedwait pthread_cond_clockwait
  pthread_cond_signal pthread_cond_broadcast
  mtx_init mtx_lock mtx_timedlock mtx_trylock mtx_unlock mtx_destroy
  cnd_init cnd_signal cnd_broadcast cnd_wait cnd_timedwait cnd_destroy
  sem_init sem_destroy sem_wait sem_trywait sem_timedwait sem_clockwait sem_post sem_getvalue
  pthread_setcanceltype  # forwarded to glibc; mirrors the cancel type (core/cancel.h)
  # the waits of the concurrency-id switch model (preload/blocking_calls.cpp)
  epoll_wait epoll_pwait epoll_pwait2 poll ppoll select pselect nanosleep clock_nanosleep
  sigwait sigwaitinfo sigtimedwait accept accept4
  # the futex waits of a program's own locks (preload/stats/waits.cpp)
  syscall
  # WiredTiger's rwlocks (preload/wtlock/wtlock.cpp, LOCKSWAP_WTLOCK)
  __wt_rwlock_init __wt_rwlock_destroy __wt_readlock __wt_try_readlock __wt_readunlock
  __wt_writelock __wt_try_writelock __wt_writeunlock
)
allowed_extra='^__pthread_(mutex|rwlock)_[a-z]+$'

# "<value> <type> <name>" for every defined dynamic symbol.
if ! listing=$("$nm" -D --defined-only "$lib"); then
  echo "FAIL: $nm could not read $lib"
  exit 1
fi
failures=0
declare -A type_of
while read -r _ type name; do
  [ -n "${name:-}" ] || continue
  type_of[$name]=$type
done <<<"$listing"

for name in "${!type_of[@]}"; do
  if [[ $name == *@* ]]; then
    echo "FAIL: versioned export: $name (interposed symbols must be unversioned)"
    failures=$((failures + 1))
  fi
done

for fn in "${required[@]}"; do
  t=${type_of[$fn]:-}
  if [ -z "$t" ]; then
    echo "FAIL: missing export: $fn"
    failures=$((failures + 1))
  elif [[ $t != [TW] ]]; then
    echo "FAIL: $fn is exported as type '$t', expected a function (T or W)"
    failures=$((failures + 1))
  fi
done

for name in "${!type_of[@]}"; do
  base=${name%%@*}
  is_required=0
  for fn in "${required[@]}"; do [ "$fn" = "$base" ] && is_required=1 && break; done
  [ $is_required -eq 1 ] && continue
  if [[ $base =~ $allowed_extra ]]; then
    if [[ ${type_of[$name]} != [TW] ]]; then
      echo "FAIL: alias $name is exported as type '${type_of[$name]}', expected a function"
      failures=$((failures + 1))
    fi
    continue
  fi
  echo "FAIL: unexpected export: $name (type ${type_of[$name]})"
  failures=$((failures + 1))
done

if [ "$failures" -ne 0 ]; then
  echo "$failures export problem(s) in $lib"
  exit 1
fi
echo "exports OK: ${#required[@]} required functions, $(( ${#type_of[@]} - ${#required[@]} )) compatibility aliases, all unversioned"
