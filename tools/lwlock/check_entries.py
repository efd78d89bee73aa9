#!/usr/bin/env python3
"""Check what a preload/lwlock/allowlist.h entry assumes about a PostgreSQL 15 binary.

    tools/lwlock/check_entries.py /usr/lib/postgresql/15/bin/postgres

docs/lwlock.md, "Adding a build", step 2: lockswap keeps the first
instruction of each redirected LWLock function and writes its undo and an
absolute jump after it (preload/lwlock/entry_patch.h: at most 24 bytes from
the entry; 24 are compared). That is correct only if nothing else in the
program reaches those bytes other than at the entry itself. For each function
this checks, in the disassembly of the whole binary (objdump, or
aarch64-linux-gnu-objdump for an arm64 binary):

  - the function is at least 24 bytes long;
  - its first instruction is no landing pad (endbr64, bti, paciasp/pacibsp);
  - no address the disassembler resolves (a jmp/jcc/call, b/bl/b.cond/cbz/
    cbnz/tbz/tbnz, adr, adrp+add, a rip-relative lea) lies in bytes 1..23;
  - no 8-byte word of the data sections and no R_*_RELATIVE addend (the
    absolute pointers and jump tables) lies in bytes 1..23;
  - the function itself has no indirect jump (a switch's table of relative
    offsets, which the two checks above cannot read);
  - no SystemTap probe site (.note.stapsdt, where a tracer writes a trap)
    lies in bytes 0..23.

Whether the first instruction is one the patch can keep in place is checked
when the entry is compiled in (allowlist.h's static_assert).

Prints one line per function and exits 1 if any check fails.
"""
import os
import re
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from allowlist_entry import ENTRY_BYTES, FUNCTIONS, machine, readelf, symbols  # noqa: E402

LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
RESOLVED = re.compile(r"(?:^|[\s,#])([0-9a-f]+) <[^>]*>")  # "4621c0 <LWLockAcquire@@Base>", "# 88d4c8 <MyProc>"
LANDING_PADS = {"endbr64", "bti", "paciasp", "pacibsp"}


def indirect_jump(isa, mnemonic, ops):
    if isa == "aarch64":
        return mnemonic == "br"
    return (mnemonic == "jmp" and ops.startswith("*")) or (mnemonic in ("notrack", "bnd") and ops.startswith("jmp"))


def objdump_for(isa):
    if isa == "aarch64" and shutil.which("aarch64-linux-gnu-objdump"):
        return "aarch64-linux-gnu-objdump"
    return "objdump"


def disassembly(path, isa):
    """(address, mnemonic, operands) of every instruction in the executable sections."""
    p = subprocess.Popen([objdump_for(isa), "-d", "-w", "--no-show-raw-insn", path], stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        m = LINE.match(line)
        if m:
            yield int(m.group(1), 16), m.group(2), m.group(3)
    if p.wait() != 0:
        sys.exit(f"{objdump_for(isa)} failed on {path}")


def referenced(isa, at, mnemonic, ops, page):
    """The code addresses one instruction names: the disassembler's resolved ones, and on arm64 an
    adrp+add pair (page: register -> the page its last adrp loaded)."""
    found = [] if mnemonic == "adrp" else [(int(m.group(1), 16), mnemonic) for m in RESOLVED.finditer(ops)]
    if isa == "aarch64":
        regs = [r.strip() for r in ops.split(",")]
        if mnemonic == "adrp" and len(regs) >= 2:
            page[regs[0]] = int(regs[1].split()[0], 16)
            return found
        if mnemonic == "add" and len(regs) >= 3 and regs[1] in page and regs[2].startswith("#"):
            found.append((page[regs[1]] + int(regs[2][1:].split()[0], 0), "adrp+add"))
        if regs and regs[0] in page:
            page.pop(regs[0])
    return found


def data_words(path):
    """Yield (value, where) for every aligned 8-byte word of the allocated, non-executable data sections."""
    data = open(path, "rb").read()
    for line in readelf("-S", path).splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+\S+\s+(\S*)", line)
        if not m or m.group(2) in ("NOBITS", "NOTE") or "A" not in m.group(6) or "X" in m.group(6):
            continue
        addr, off, size = int(m.group(3), 16), int(m.group(4), 16), int(m.group(5), 16)
        skip = (-addr) % 8
        for i in range(off + skip, off + size - 7, 8):
            yield struct.unpack_from("<Q", data, i)[0], f"{m.group(1)}+{i - off:#x}"


def relative_addends(path):
    for line in readelf("-r", path).splitlines():
        f = line.split()
        if len(f) >= 4 and f[2].endswith("_RELATIVE"):
            yield int(f[-1], 16), f"reloc at {f[0]}"


def probe_sites(path):
    for m in re.finditer(r"Location: (0x[0-9a-f]+)", readelf("-n", path)):
        yield int(m.group(1), 16)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: " + __doc__.strip().splitlines()[2].strip())
    path = sys.argv[1]
    isa = machine(path)
    if isa not in ("x86_64", "aarch64"):
        sys.exit(f"{path}: {isa}: lockswap redirects only x86_64 and aarch64")
    syms = symbols(path)
    problems = {name: [] for name in FUNCTIONS}

    def inside(a, first):
        return [n for n, (lo, _) in syms.items() if lo + first <= a < lo + ENTRY_BYTES]

    lo_all = min(lo for lo, _ in syms.values())
    hi_all = max(lo + size for lo, size in syms.values())
    first_insn, indirect, references, page = {}, {n: 0 for n in FUNCTIONS}, 0, {}
    for at, mnemonic, ops in disassembly(path, isa):
        if lo_all <= at < hi_all:
            for n, (lo, size) in syms.items():
                if lo <= at < lo + size:
                    first_insn.setdefault(n, mnemonic if at == lo else None)
                    indirect[n] += indirect_jump(isa, mnemonic, ops)
        for a, what in referenced(isa, at, mnemonic, ops, page):
            references += 1
            if lo_all < a < hi_all:
                for n in inside(a, 1):
                    problems[n].append(f"{what} at {at:#x} reaches {a:#x} (+{a - syms[n][0]})")
    words = 0
    for source in (data_words(path), relative_addends(path)):
        for a, where in source:
            words += 1
            for n in inside(a, 1) if lo_all < a < hi_all else ():
                problems[n].append(f"pointer {a:#x} (+{a - syms[n][0]}) in {where}")
    probes = list(probe_sites(path))
    for a in probes:
        for n in inside(a, 0):
            problems[n].append(f"SystemTap probe site at {a:#x}")
    for n in FUNCTIONS:
        lo, size = syms[n]
        if size < ENTRY_BYTES:
            problems[n].append(f"only {size} bytes")
        if first_insn.get(n) in LANDING_PADS:
            problems[n].append(f"starts with {first_insn[n]}")
        if first_insn.get(n) is None:
            problems[n].append("no instruction at its entry in the disassembly")
        if indirect[n]:
            problems[n].append(f"{indirect[n]} indirect jump(s) in the function")
    print(f"{path}: {isa}, {references} resolved code references, {words} data words and relocations, "
          f"{len(probes)} probe sites")
    for n in FUNCTIONS:
        lo, size = syms[n]
        status = "ok  " if not problems[n] else "FAIL"
        print(f"{status} {n} at {lo:#x}, {size} bytes, first instruction {first_insn.get(n, '?')}")
        for p in problems[n]:
            print(f"       {p}")
    sys.exit(1 if any(problems.values()) else 0)


if __name__ == "__main__":
    main()
