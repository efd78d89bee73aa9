#!/usr/bin/env bash
# examples/servers/pg_arm64_qemu.sh — a multi-process arm64 PostgreSQL 15
# server under qemu-user with the cross-built lockswap preloaded, driven from
# the host by the amd64 pgbench: the arm64 builds of the LWLock allow-list
# (docs/lwlock.md) with real backends, waiters and sleeps between processes.
#
#   pg_arm64_qemu.sh [--builds DIR[,DIR...]] [--variants V[,V...]]
#                    [--lib PATH] [--root DIR] [--time S] [--clients N]
#                    [--threads N] [--scale N] [--dir D] [--port P]
#                    [--amcheck yes|no]
#
#   --builds    extracted arm64 postgresql-15 packages (`dpkg-deb -x`), each
#               holding usr/lib/postgresql/15/bin/postgres
#               [/tmp/pgdl/x-postgresql-15_15.18-0+deb12u1_arm64,
#                /tmp/pgdl/x-postgresql-15_15.20-0+deb12u1_arm64]
#   --variants  none (no preload: the reference) or any LOCKSWAP_LWLOCK value
#               [none,pg,rwsem,percid]
#   --lib       the aarch64 liblockswap.so, cross-built as tests/aarch64/run.sh
#               does [/tmp/aarch64-lockswap/lockswap/preload/liblockswap.so]
#   --root      arm64 sysroot for qemu -L: the libraries `readelf -d postgres`
#               needs and their dependencies, libc6 included, each Debian
#               package `dpkg-deb -x`ed into it (docs/lwlock.md, "Adding a
#               build", for a private arm64 apt state) [/tmp/arm64-root]
#   --time S    seconds of `pgbench -c N -j N` [20]
#   --clients N / --threads N   pgbench clients and threads [4 / 2]
#   --scale N   `pgbench -i -s N` [1]
#   --dir D     logs, statistics, results [/tmp/pg_arm64_qemu-<date-time>]
#   --port P    first port; run k uses P + k (unix socket only) [27040]
#   --amcheck   bt_index_check(i, true) on every btree index and
#               verify_heapam on every pgbench table after the load [yes]
#
# Every (build, variant) starts from a copy of one cluster made by the host's
# amd64 initdb (/usr/lib/postgresql/15/bin/initdb, --no-locale -E UTF8):
# amd64 and arm64 are both LP64 little-endian with MAXALIGN 8, and the arm64
# pg_controldata's view of it is printed first. The arm64 postmaster runs as
# `qemu-aarch64-static -L ROOT -E LD_PRELOAD=LIB -E LOCKSWAP_LWLOCK=V
# -E LOCKSWAP_STATS=counts -E LOCKSWAP_STATS_FILE=D/B-V/stats/%p
# .../bin/postgres -D DATA` (a static qemu: the host's LD_PRELOAD never
# applies to qemu itself; every backend is a fork() of it, emulated by the
# same qemu), as the unprivileged user lockswap-srv when run as root
# (SRV_USER), listening only on a unix socket in its own directory under
# /tmp, with fsync=off (commits still take the WAL write locks). From the
# host: `pgbench -i -s SCALE`, `pgbench -c N -j N -T S`, amcheck, then a fast
# shutdown (SIGINT).
#
# PASS for one (build, variant) needs: the server up, both pgbench runs
# complete with "number of failed transactions: 0", amcheck clean, exit
# status 0 after SIGINT with "database system is shut down" in the log and no
# PANIC, no "terminated by signal"; for a variant other than none, the
# postmaster's statistics record says lwlock=V (the library redirected) and
# the lwlock records of every process sum to LWLock acquisitions > 0, all on
# V (percid's records name it on every tranche).
#
# OUTPUT: one line per (build, variant) on stdout and in D/results.txt:
#   PASS|FAIL BUILD/VARIANT tps=T failed=F acq=A waits=W procs=P tranches=N shutdown=clean|... amcheck=ok|... SECONDS [reason]
# acq: LWLock acquisitions summed over every process's lwlock records, waits:
# the calls among them that waited, procs: the processes that wrote a
# dump, tranches: the tranches used; per tranche (name, variant, acq, waits)
# in D/B-V/tranches.txt.
# EXIT STATUS: 0 when every run passed, 1 on any failure, 2 for bad
# arguments, 77 when qemu, the builds, the library or the root are missing.
# Not a ctest test: it needs the downloaded arm64 packages.
# Memory: under vm.overcommit_memory=2 every emulated process is charged
# about 150 MB of commit; with a 4.5 GB CommitLimit, 16 clients (about 22
# processes) can fail to fork ("could not fork new process for connection:
# Cannot allocate memory", with or without the preload). `lockswap report
# D/B-V/stats/*` prints the per-tranche table of a run.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../../tests/common/options.sh
source "$here/../../tests/common/options.sh"

builds=/tmp/pgdl/x-postgresql-15_15.18-0+deb12u1_arm64,/tmp/pgdl/x-postgresql-15_15.20-0+deb12u1_arm64
variants=none,pg,rwsem,percid
lib=/tmp/aarch64-lockswap/lockswap/preload/liblockswap.so
root=/tmp/arm64-root time_s=20 clients=4 threads=2 scale=1 dir='' port=27040 amcheck=yes
for a in "$@"; do [[ "$a" == -h || "$a" == --help ]] && { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }; done
lstest_options pg_arm64_qemu.sh builds=builds variants=variants lib=lib root=root time=time_s clients=clients \
  threads=threads scale=scale dir=dir port=port amcheck=amcheck -- "$@"
for n in "$time_s" "$clients" "$threads" "$scale" "$port"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "pg_arm64_qemu.sh: not a positive number: $n" >&2; exit 2; }
done
[[ $amcheck == yes || $amcheck == no ]] || { echo "pg_arm64_qemu.sh: --amcheck takes yes or no" >&2; exit 2; }
IFS=, read -r -a BUILDS <<<"$builds"
IFS=, read -r -a VARIANTS <<<"$variants"

HOSTBIN=/usr/lib/postgresql/15/bin   # amd64 initdb, pgbench, psql, pg_isready
QEMU=$(command -v qemu-aarch64-static || true)
skip() { echo "SKIP: $*"; exit 77; }
[[ -n $QEMU ]] || skip "no qemu-aarch64-static (Debian package qemu-user-static)"
for t in initdb pgbench psql pg_isready; do [[ -x $HOSTBIN/$t ]] || skip "no $HOSTBIN/$t (postgresql-15)"; done
[[ -f $root/lib/ld-linux-aarch64.so.1 || -L $root/lib/ld-linux-aarch64.so.1 ]] || skip "no arm64 sysroot at $root (--root)"
readelf -h "$lib" 2>/dev/null | grep -q 'Machine:.*AArch64' || skip "no aarch64 library at $lib (--lib; tests/aarch64/run.sh builds it)"
for b in "${BUILDS[@]}"; do
  [[ -x $b/usr/lib/postgresql/15/bin/postgres ]] || skip "no $b/usr/lib/postgresql/15/bin/postgres (--builds)"
done

dir=${dir:-/tmp/pg_arm64_qemu-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
RESULTS=$dir/results.txt
: >"$RESULTS"
SRV_USER=${SRV_USER:-lockswap-srv}
if ((EUID == 0)); then
  id "$SRV_USER" >/dev/null 2>&1 || skip "no user $SRV_USER to run the server as (SRV_USER)"
  AS_SRV=(setpriv --reuid="$SRV_USER" --regid="$SRV_USER" --init-groups --)
else
  SRV_USER=$(id -un) AS_SRV=()
fi
work=$(mktemp -d /tmp/pg_arm64_qemu.XXXXXX)
chmod 755 "$work"
log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

SRV_PID=''
stop_server() {  # fast shutdown, bounded; then SIGQUIT, then SIGKILL
  local pid=$SRV_PID i
  [[ -n $pid ]] || return 0
  SRV_PID=''
  kill -INT "$pid" 2>/dev/null || true
  for ((i = 0; i < 240; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then
    log "postmaster $pid not down after 120 s of fast shutdown: SIGQUIT"
    kill -QUIT "$pid" 2>/dev/null || true; sleep 5
    kill -KILL "$pid" 2>/dev/null || true
  fi
  local rc=0
  wait "$pid" 2>/dev/null || rc=$?
  SHUTDOWN_RC=$rc
}
cleanup() {  # the data directories go only once their server is down
  stop_server
  if [[ -n $LAST_PID ]] && kill -0 "$LAST_PID" 2>/dev/null; then log "postmaster $LAST_PID still running: $work kept"; else rm -rf "$work"; fi
}
LAST_PID=
trap cleanup EXIT
trap 'exit 130' INT TERM

log "initdb (amd64 $("$HOSTBIN/initdb" --version)) of the template cluster"
tmpl=$work/template
mkdir -p "$tmpl"; chown "$SRV_USER:" "$tmpl" 2>/dev/null || true
"${AS_SRV[@]}" env -i PATH=/usr/bin:/bin HOME="$work" LC_ALL=C timeout 300 "$HOSTBIN/initdb" -D "$tmpl" -U postgres \
  --no-locale -E UTF8 -A trust >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; echo "FAIL initdb"; exit 1; }

q() {  # psql against the running server (host amd64 client)
  timeout "${Q_TIMEOUT:-300}" "$HOSTBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$sock" -p "$PORT" -U postgres -d postgres "$@"
}

k=0 fails=0
for b in "${BUILDS[@]}"; do
  bin=$b/usr/lib/postgresql/15/bin
  bname=$("$QEMU" -L "$root" "$bin/postgres" --version 2>/dev/null | sed -n 's/.*PostgreSQL) \([0-9.]*\).*/\1/p')
  bname=${bname:-$(basename "$b")}-arm64
  bid=$(readelf -n "$bin/postgres" | sed -n 's/.*Build ID: //p')
  log "$bname: $bin/postgres build-id $bid"
  timeout 60 "$QEMU" -L "$root" "$bin/pg_controldata" -D "$tmpl" 2>&1 |
    grep -E 'pg_control version|Catalog version|Maximum data alignment|Database block size|WAL block size|float8|Database cluster state' |
    sed "s/^/  $bname pg_controldata: /" >&2 || true
  for v in "${VARIANTS[@]}"; do
    run=$bname-$v
    out=$dir/$run
    rm -rf "$out"; mkdir -p "$out/stats"; chown "$SRV_USER:" "$out/stats"
    data=$work/$run/data sock=$work/$run/sock PORT=$((port + k))
    k=$((k + 1))
    mkdir -p "$sock"; cp -a "$tmpl" "$data"; chown "$SRV_USER:" "$sock" "$data"
    qenv=()
    if [[ $v != none ]]; then
      qenv=(-E "LD_PRELOAD=$lib" -E "LOCKSWAP_LWLOCK=$v" -E LOCKSWAP_STATS=counts -E "LOCKSWAP_STATS_FILE=$out/stats/%p")
    fi
    log "$run: postmaster on $sock port $PORT (${qenv[*]:-no preload})"
    t0=$(date +%s)
    "${AS_SRV[@]}" env -i PATH=/usr/bin:/bin HOME="$work" LC_ALL=C TZ=UTC \
      "$QEMU" -L "$root" "${qenv[@]}" "$bin/postgres" -D "$data" -c listen_addresses= \
      -c "unix_socket_directories=$sock" -c port="$PORT" -c fsync=off -c huge_pages=off -c max_connections=20 \
      -c shared_buffers=32MB -c logging_collector=off -c log_min_messages=warning >"$out/server.log" 2>&1 &
    SRV_PID=$! LAST_PID=$! SHUTDOWN_RC=''  # the postmaster itself: setpriv, env and qemu exec
    reason='' tps='-' failed='-' amc='-'
    up=no
    for ((i = 0; i < 240; i++)); do
      if "$HOSTBIN/pg_isready" -q -h "$sock" -p "$PORT" -U postgres -d postgres 2>/dev/null; then up=yes; break; fi
      kill -0 "$SRV_PID" 2>/dev/null || break
      sleep 0.5
    done
    if [[ $up != yes ]]; then
      reason="server did not come up: $(grep -m1 -E 'FATAL|PANIC|lockswap' "$out/server.log" || tail -1 "$out/server.log")"
    elif ! timeout 900 "$HOSTBIN/pgbench" -h "$sock" -p "$PORT" -U postgres -i -s "$scale" postgres >"$out/pgbench-init.log" 2>&1; then
      reason="pgbench -i failed: $(tail -1 "$out/pgbench-init.log")"
    elif ! timeout $((time_s + 300)) "$HOSTBIN/pgbench" -h "$sock" -p "$PORT" -U postgres -c "$clients" -j "$threads" \
           -T "$time_s" postgres >"$out/pgbench.log" 2>&1; then
      reason="pgbench failed: $(grep -m1 -iE 'error|abort' "$out/pgbench.log" || tail -1 "$out/pgbench.log")"
    fi
    if [[ -f $out/pgbench.log ]]; then
      tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$out/pgbench.log")
      failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$out/pgbench.log")
      tps=${tps:--} failed=${failed:--}
      [[ -n $reason || $failed == 0 ]] || reason="failed transactions: $failed"
      [[ -n $reason || $tps != - ]] || reason="no tps line from pgbench"
    fi
    if [[ -z $reason && $amcheck == yes ]]; then
      if q -c 'CREATE EXTENSION IF NOT EXISTS amcheck' >"$out/amcheck.log" 2>&1 &&
         q -c "SELECT c.relname, bt_index_check(c.oid, true) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               JOIN pg_am a ON a.oid = c.relam WHERE a.amname = 'btree' AND c.relname LIKE 'pgbench%'" >>"$out/amcheck.log" 2>&1 &&
         bad=$(q -c "SELECT count(*) FROM (SELECT (verify_heapam(r::regclass)).* FROM
               unnest(ARRAY['pgbench_accounts','pgbench_branches','pgbench_tellers','pgbench_history']) r) x" 2>>"$out/amcheck.log"); then
        nidx=$(grep -c pgbench "$out/amcheck.log" || true)
        if [[ $bad == 0 && $nidx -ge 3 ]]; then amc=ok; else amc="bad:$bad,indexes:$nidx"; reason="amcheck: heap rows $bad, indexes checked $nidx"; fi
      else
        amc=error; reason="amcheck failed: $(tail -1 "$out/amcheck.log")"
      fi
    fi
    stop_server
    secs=$(($(date +%s) - t0))
    shut=clean
    if [[ $SHUTDOWN_RC != 0 ]]; then shut="exit-$SHUTDOWN_RC"
    elif ! grep -q 'database system is shut down' "$out/server.log"; then shut=no-shutdown-line
    elif grep -qE 'PANIC|terminated by signal|unhandled|core dumped' "$out/server.log"; then shut=panic-or-signal
    fi
    [[ -n $reason || $shut == clean ]] || reason="shutdown: $shut ($(grep -m1 -E 'PANIC|terminated by signal|unhandled' "$out/server.log" || tail -1 "$out/server.log"))"
    acq='-' waits='-' procs='-' ntr='-'
    if [[ $v != none ]]; then
      cat "$out"/stats/* 2>/dev/null >"$out/stats.all" || true
      procs=$(find "$out/stats" -type f | wc -l)
      awk -v want="$v" '
        $2 == "lwlock" { t = ""; var = ""; a = 0; w = 0
          for (i = 3; i <= NF; i++) { split($i, kv, "=")
            if (kv[1] == "tranche") t = kv[2]; else if (kv[1] == "variant") var = kv[2]
            else if (kv[1] == "acq") a = kv[2]; else if (kv[1] == "waits") w = kv[2] }
          acq[t] += a; waits[t] += w; vs[t] = vs[t] (index(vs[t], var) ? "" : (vs[t] == "" ? "" : ",") var) }
        END { for (t in acq) printf "%-28s %-8s %12d %8d\n", t, vs[t], acq[t], waits[t] }' "$out/stats.all" |
        sort -k3,3nr >"$out/tranches.txt"
      acq=$(awk '{ s += $3 } END { print s + 0 }' "$out/tranches.txt")
      waits=$(awk '{ s += $4 } END { print s + 0 }' "$out/tranches.txt")
      ntr=$(wc -l <"$out/tranches.txt")
      other=$(awk -v want="$v" '$2 != want' "$out/tranches.txt" | head -3 | tr -s ' ' | tr '\n' ';')
      pm=$(grep -l "pid=$LAST_PID " "$out"/stats/* 2>/dev/null | head -1 || true)
      said=no
      [[ -n $pm ]] && grep -E '^[^ ]+ begin ' "$pm" | grep -q " lwlock=$v " && said=yes
      [[ -n $pm ]] && grep -E '^[^ ]+ begin ' "$pm" | grep -q " lwlock=$v$" && said=yes
      echo "postmaster pid $LAST_PID: statistics file ${pm:-none}, begin says lwlock=$v: $said" >"$out/redirected.txt"
      if [[ -z $reason ]]; then
        if [[ $said != yes ]]; then reason="the postmaster's statistics do not say lwlock=$v (not redirected?)"
        elif ((acq == 0)); then reason="no LWLock acquisition counted"
        elif [[ -n $other ]]; then reason="tranches on another variant: $other"
        fi
      fi
    fi
    verdict=PASS
    [[ -z $reason ]] || { verdict=FAIL; fails=$((fails + 1)); }
    line="$verdict $bname/$v tps=$tps failed=$failed acq=$acq waits=$waits procs=$procs tranches=$ntr shutdown=$shut amcheck=$amc ${secs}s${reason:+ $reason}"
    echo "$line" | tee -a "$RESULTS"
    rm -rf "${work:?}/$run"
  done
done
log "logs and statistics in $dir"
((fails == 0)) || exit 1
