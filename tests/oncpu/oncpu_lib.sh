# tests/oncpu/oncpu_lib.sh — what the eBPF owner-on-CPU tests share. Source
# it with LOADER set: it skips (exit 77, with the reason) where the map cannot
# be loaded here. Unless ONCPU_LIB_NO_START=1 (a test with pins of its own),
# it also starts the machine's loader unless it already runs, and stops at
# exit only what it started (stop_started_loader does that early).
# shellcheck shell=bash
skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "not root: loading the eBPF program needs CAP_BPF and CAP_PERFMON"
[[ -r /sys/kernel/btf/vmlinux ]] || skip "no kernel BTF (/sys/kernel/btf/vmlinux): CO-RE cannot relocate"
[[ -d /sys/fs/bpf ]] || skip "no /sys/fs/bpf to mount a bpf filesystem on"

started=0
stop_started_loader() {
  if ((started)); then "$LOADER" stop >/dev/null || true; fi
  started=0
}
if [[ "${ONCPU_LIB_NO_START:-0}" != 1 ]]; then
  trap stop_started_loader EXIT
  if ! "$LOADER" status >/dev/null 2>&1; then
    out=$("$LOADER" start 2>&1) || skip "the loader could not start here: $out"
    started=1
  fi
fi
