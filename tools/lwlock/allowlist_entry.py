#!/usr/bin/env python3
"""Print the preload/lwlock/allowlist.h entry of a PostgreSQL 15 binary.

    tools/lwlock/allowlist_entry.py /usr/lib/postgresql/15/bin/postgres --label "15.18 Debian 12 amd64"

Reads the GNU build-id, the address of every redirected LWLock function
(.dynsym) and the first 24 bytes at each entry, and the offset of
PGPROC.pgprocno, which must be given (--pgprocno-offset) or is found by
compiling offsetof(PGPROC, pgprocno) against the server headers
(postgresql-server-dev-15) when they are installed and the binary is of this
machine's instruction set. In the disassembly the offset is the 32-bit load
from MyProc in LWLockQueueSelf (static, called from LWLockAcquire's wait
path), after lwWaiting and lwWaitMode are stored: `movslq OFF(%rax)` on
x86-64, `ldr wN, [xM, #OFF]` (or `ldrsw xN, ...`) on arm64. docs/lwlock.md,
"Adding a build", says how to check the result (tools/lwlock/check_entries.py).
"""
import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile

FUNCTIONS = ["LWLockAcquire", "LWLockConditionalAcquire", "LWLockAcquireOrWait", "LWLockWaitForVar",
             "LWLockUpdateVar", "LWLockRelease", "LWLockReleaseClearVar", "LWLockReleaseAll", "LWLockHeldByMe",
             "LWLockHeldByMeInMode", "LWLockAnyHeldByMe", "ForEachLWLockHeldByMe"]
ENTRY_BYTES = 24


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True, text=True).stdout


def build_id(path):
    m = re.search(r"Build ID: ([0-9a-f]+)", readelf("-n", path))
    if not m:
        sys.exit(f"{path}: no GNU build-id note")
    return m.group(1)


def machine(path):
    m = re.search(r"Machine:\s+(.*)", readelf("-h", path))
    text = m.group(1) if m else ""
    return "aarch64" if "AArch64" in text else "x86_64" if "X86-64" in text else text


def symbols(path):
    found = {}
    for line in readelf("--dyn-syms", path).splitlines():
        f = line.split()
        if len(f) >= 8 and f[3] == "FUNC" and f[7].split("@")[0] in FUNCTIONS:
            found[f[7].split("@")[0]] = (int(f[1], 16), int(f[2]))
    missing = [n for n in FUNCTIONS if n not in found]
    if missing:
        sys.exit(f"{path}: does not export {', '.join(missing)}")
    return found


def file_offset(path, vaddr):
    for line in readelf("-l", path).splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            off, va, filesz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if va <= vaddr < va + filesz:
                return off + vaddr - va
    sys.exit(f"{path}: address {vaddr:#x} is in no loaded segment")


def pgprocno_offset(isa):
    if isa != {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine()):
        sys.exit(f"give --pgprocno-offset: the server headers here are not for {isa} (read it in the disassembly)")
    inc = subprocess.run(["pg_config", "--includedir-server"], capture_output=True, text=True).stdout.strip()
    if not inc or not os.path.exists(os.path.join(inc, "storage", "proc.h")):
        sys.exit("give --pgprocno-offset (no server headers: install postgresql-server-dev-15)")
    src = '#include "postgres.h"\n#include "storage/proc.h"\n#include <stdio.h>\n#include <stddef.h>\n' \
          'int main(void) { printf("%zu\\n", offsetof(PGPROC, pgprocno)); return 0; }\n'
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "p.c"), "w").write(src)
        subprocess.run(["cc", "-I", inc, "-o", os.path.join(d, "p"), os.path.join(d, "p.c")], check=True)
        version = subprocess.run(["pg_config", "--version"], capture_output=True, text=True).stdout.strip()
        print(f"pgprocno offset from the headers of {version}: check it in the disassembly for another release",
              file=sys.stderr)
        return int(subprocess.run([os.path.join(d, "p")], check=True, capture_output=True, text=True).stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary")
    ap.add_argument("--label", required=True, help='e.g. "15.18 Debian 12 amd64"')
    ap.add_argument("--pgprocno-offset", type=lambda s: int(s, 0))
    a = ap.parse_args()
    syms = symbols(a.binary)
    data = open(a.binary, "rb").read()
    isa = machine(a.binary)
    off = a.pgprocno_offset if a.pgprocno_offset is not None else pgprocno_offset(isa)
    print(f'  {{"{build_id(a.binary)}", "{a.label}", Isa::{isa}, {off:#x},')
    print("   {")
    for name in FUNCTIONS:
        addr, size = syms[name]
        at = file_offset(a.binary, addr)
        entry = data[at:at + min(ENTRY_BYTES, size)]
        print(f'       "{entry.hex()}",  // {name}, {size} bytes')
    print("   }},")


if __name__ == "__main__":
    main()
