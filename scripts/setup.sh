#!/usr/bin/env bash
# scripts/setup.sh — install everything lockswap's build, tests and demo need
# on a fresh Debian 12 machine (run as root). Idempotent: when every package
# is already installed it touches neither apt nor the network.
set -euo pipefail

PACKAGES=(
  build-essential cmake g++ pkg-config
  libgtest-dev googletest
  libunwind-dev libjemalloc-dev libjemalloc2
  valgrind
  systemtap-sdt-dev bpftrace             # USDT probes (core/trace.h) and their test
  sysbench
  mariadb-server mariadb-client
  postgresql-15 gdb                      # gdb: the pg_lwlock cancel check holds a lock in a stopped backend
  memcached libmemcached-tools
  libwiredtiger-dev rocksdb-tools
  python3 python3-matplotlib            # lockswap report/compare: --png
  gnuplot-nox
  procps
  spin                                   # tests/model: Promela model checking
  clang libclang-rt-14-dev               # tests/fuzz: libFuzzer (runtime is only a Recommends of clang)
  libbpf-dev bpftool                     # tools/oncpu: the owner-on-CPU eBPF program (clang -target bpf above)
  g++-aarch64-linux-gnu qemu-user-static # tests/aarch64: cross build, run under qemu
  debootstrap                            # tests/glibc_tier: the Debian 13 (glibc 2.41) root file system
)

# The runners' servers (examples/servers/) run as this system account when
# started by root: no shell, no home, shared with no other daemon.
SERVER_ACCOUNT=lockswap-srv
ensure_server_account() {
  id "$SERVER_ACCOUNT" >/dev/null 2>&1 && return 0
  [[ $(id -u) -eq 0 ]] || { echo "setup: account $SERVER_ACCOUNT missing (created as root)" >&2; return 0; }
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$SERVER_ACCOUNT"
  echo "setup: created system account $SERVER_ACCOUNT"
}

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
  ensure_server_account
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: run as root (or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi

echo "setup: installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Installing mariadb-server must not start (or fail to start) a system-wide
# server: the demo runs its own private instance. policy-rc.d is the Debian
# mechanism for that; remove it again afterwards only if we created it.
created_policy=0
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  created_policy=1
fi
cleanup() { if ((created_policy)); then rm -f /usr/sbin/policy-rc.d; fi; }
trap cleanup EXIT

apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
ensure_server_account
echo "setup: done"
