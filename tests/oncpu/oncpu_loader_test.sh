#!/usr/bin/env bash
# tests/oncpu/oncpu_loader_test.sh LOADER — the loader's own care with its
# pins (design: tools/oncpu/lockswap-oncpu.c): `status` reads within
# the map when pid_max grew after `start`, a pin directory that others could
# have written to is refused, half-pinned states are recovered. Runs a
# separate instance under a pin directory of its own (--pin-dir), so the
# machine's loader, if any, is left alone. Root only: exit 77 (skipped) with
# the reason otherwise.
set -euo pipefail
LOADER=${1:?usage: oncpu_loader_test.sh LOADER}
# shellcheck disable=SC2034  # read by oncpu_lib.sh
ONCPU_LIB_NO_START=1
# shellcheck source=oncpu_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/oncpu_lib.sh"

DIR=/sys/fs/bpf/lockswap-test-$$   # bpffs refuses dots in names
L=("$LOADER" --pin-dir "$DIR")
pid_max_saved=$(cat /proc/sys/kernel/pid_max)
holder=
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  [[ -n "$holder" ]] && kill "$holder" 2>/dev/null
  echo "$pid_max_saved" >/proc/sys/kernel/pid_max
  [[ -L "$DIR" ]] && rm -f "$DIR"
  if [[ -d "$DIR" ]]; then chown root "$DIR"; chmod 0700 "$DIR"; "${L[@]}" stop >/dev/null 2>&1 || true; fi
  [[ -d "$DIR" ]] && rm -rf "$DIR"
  return 0
}
trap cleanup EXIT

# A first start proves the program loads here at all.
out=$("${L[@]}" start 2>&1) || skip "the loader could not start here: $out"

# shellcheck source=../../tests/tools/expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tests/tools/expect.sh"
map_id() { "${L[@]}" status | sed -n 's/.*map id \([0-9]*\),.*/\1/p'; }
header_is_zero() { bpftool -j map lookup id "$1" key 0 0 0 0 | grep -q '"value":\["0x00","0x00","0x00","0x00","0x00","0x00","0x00","0x00"\]'; }

expect relative-pin-dir 2 'absolute path' -- "$LOADER" --pin-dir relative status
expect started-mode 0 '^drwx------ root$' -- stat -c '%A %U' "$DIR"
expect status-self 0 'header live, this process reads on CPU' -- "${L[@]}" status
expect status-tid-beyond 0 'thread 99999999 reads beyond the map' -- "${L[@]}" status 99999999
expect status-idle-tid 0 'thread 1 reads (blocked|unknown)' -- "${L[@]}" status 1

# pid_max grows after start: a map sized for 4096 thread ids, then `status`
# from a process whose pid is far beyond it (ns_last_pid picks the next pid).
# pid_max is lowered only for the start itself, and restored at once.
procs=(/proc/[0-9]*)
if [[ -w /proc/sys/kernel/ns_last_pid ]] && ((pid_max_saved > 20000)) && ((${#procs[@]} < 2000)); then
  "${L[@]}" stop >/dev/null
  echo 4096 >/proc/sys/kernel/pid_max
  set +e; small=$("${L[@]}" start 2>&1); set -e
  echo "$pid_max_saved" >/proc/sys/kernel/pid_max
  if grep -q 'started: 4096 thread ids' <<<"$small"; then
    echo $((pid_max_saved - 1000)) >/proc/sys/kernel/ns_last_pid
    expect status-after-pid-max-grew 0 'this process reads beyond the map' -- "${L[@]}" status
  else
    bad "start with pid_max 4096: $small"
  fi
else
  echo "skip status-after-pid-max-grew: ns_last_pid not writable or pid_max too small here"
fi

# A half-pinned state: start, a reader holding the map ($holder), then one
# pin removed; the map's id in $id.
half_pin() {  # half_pin PIN_TO_REMOVE
  "${L[@]}" start >/dev/null
  id=$(map_id)
  "${L[@]}" exec -- sleep 60 &
  holder=$!
  sleep 0.2
  rm "$DIR/$1"
}
drop_holder() { kill "$holder"; wait "$holder" 2>/dev/null || true; holder=; }

# Link only (the map pin removed): stop reaches the map through the link's
# program, marks it not live for the reader that still holds it, and unpins
# the link (the program detaches).
"${L[@]}" stop >/dev/null
half_pin oncpu_map
expect half-link-status 3 'half-pinned .* \(only the link\)' -- "${L[@]}" status
expect half-link-stop 0 'stopped' -- "${L[@]}" stop
if header_is_zero "$id"; then ok half-link-marked-not-live; else bad "half-link: map $id still live after stop"; fi
expect half-link-gone 3 'stopped' -- "${L[@]}" status
drop_holder

# Map only (the link pin removed, the program detached): start marks the
# orphan map not live, removes it and pins afresh.
half_pin oncpu_link
expect half-map-status 3 'half-pinned .* \(only the map\)' -- "${L[@]}" status
expect half-map-start 0 'recovering a half-pinned state under .* \(only the map\)' -- "${L[@]}" start
if header_is_zero "$id"; then ok half-map-orphan-marked-not-live; else bad "half-map: orphan map $id still live"; fi
expect half-map-restarted 0 'header live' -- "${L[@]}" status
if [[ "$(map_id)" != "$id" ]]; then ok half-map-new-map; else bad "half-map: same map $id re-used"; fi
drop_holder

# A pin directory someone else could have written to is refused, by every
# command, and left as it is.
"${L[@]}" stop >/dev/null
mkdir -m 0700 "$DIR"
chmod 0777 "$DIR"
expect world-writable-start 1 'refusing the pin directory .*writable by group or others' -- "${L[@]}" start
expect world-writable-status 1 'refusing the pin directory' -- "${L[@]}" status
expect world-writable-exec 2 'not available' -- "${L[@]}" exec -- true
expect world-writable-stop 1 'refusing the pin directory' -- "${L[@]}" stop
chmod 0720 "$DIR"
expect group-writable-start 1 'writable by group or others' -- "${L[@]}" start
chmod 0700 "$DIR"
chown nobody "$DIR"
expect foreign-owner-start 1 'not owned by root \(owner uid [0-9]+' -- "${L[@]}" start
if [[ -z "$(ls -A "$DIR")" ]]; then ok refused-dir-untouched; else bad "refused dir got pins: $(ls -A "$DIR")"; fi
chown root "$DIR"
rmdir "$DIR"
if ln -s /sys/fs/bpf "$DIR" 2>/dev/null; then
  expect symlink-start 1 'is a symbolic link' -- "${L[@]}" start
  rm -f "$DIR"
else
  echo "skip symlink-start: this bpffs takes no symbolic links"
fi
expect fresh-start 0 'started' -- "${L[@]}" start
expect fresh-stop 0 'stopped' -- "${L[@]}" stop

exit $((fails > 0))
