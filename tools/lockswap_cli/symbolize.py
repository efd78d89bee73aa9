"""Address -> (file, offset) -> symbol, with addr2line over untrusted ELF files."""

import bisect
import os
import re
import struct
import subprocess
import time
from stat import S_ISREG
from .common import shown, warn
from .statsfile import U64_LIMIT


# The mapped files are untrusted too (another machine's, replaced since, or
# crafted): one that is not a regular, complete ELF file is skipped with a
# warning, and addr2line runs are bounded in number of files, addresses per
# run, time per run and time in all.

MAX_SYMBOLIZED_FILES = 64       # the files with the most addresses; the rest keep file+offset
MAX_ADDRS_PER_RUN = 1000        # addresses per addr2line process
ADDR2LINE_TIMEOUT_S = 30.0      # one addr2line process
SYMBOLIZE_BUDGET_S = 90.0       # all of them together
MAX_PHDRS_BYTES = 1 << 20       # a program header table larger than this is not a real one


def locate(maps, ip):
    """ip -> (path, file offset) through the process's executable mappings (sorted by start),
    or (None, ip)."""
    i = bisect.bisect_right(maps, (ip, U64_LIMIT))
    for start, end, offset, path in reversed(maps[max(i - 4, 0):i]):  # overlaps: a few, not all
        if start <= ip < end:
            return path, ip - start + offset
    return None, ip


class NotElf(Exception):
    """A mapped file that cannot be symbolized; the message says why."""


def elf_load_segments(path):
    """[(p_offset, p_vaddr, p_filesz)] of the PT_LOAD segments of the ELF file at PATH, or NotElf
    saying why not (not a regular file, not ELF, truncated, ...)."""
    if "\0" in path:
        raise NotElf("not a file name (NUL byte)")
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not S_ISREG(st.st_mode):
                raise NotElf("not a regular file")
            ident = fh.read(64)
            if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
                raise NotElf("not an ELF file")
            is64, endian = ident[4] == 2, "<" if ident[5] == 1 else ">"
            if is64 and len(ident) < 64:
                raise NotElf("truncated ELF header")
            if is64:
                phoff, = struct.unpack_from(endian + "Q", ident, 32)
                phentsize, phnum = struct.unpack_from(endian + "HH", ident, 54)
                need, fmt = 56, endian + "IIQQQQ"
            else:
                phoff, = struct.unpack_from(endian + "I", ident, 28)
                phentsize, phnum = struct.unpack_from(endian + "HH", ident, 42)
                need, fmt = 32, endian + "IIIII"
            if phentsize < need or phnum == 0 or phentsize * phnum > MAX_PHDRS_BYTES:
                raise NotElf(f"implausible program header table ({phnum} entries of {phentsize} bytes)")
            if phoff + phentsize * phnum > st.st_size:
                raise NotElf("truncated (program headers beyond the end of the file)")
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
    except OSError as e:
        raise NotElf(e.strerror or str(e)) from None
    if len(table) < phentsize * phnum:
        raise NotElf("truncated (file shrank while read)")
    segs = []
    for i in range(phnum):
        fields = struct.unpack_from(fmt, table, i * phentsize)
        p_type, p_offset, p_vaddr, p_filesz = ((fields[0], fields[2], fields[3], fields[5]) if is64
                                               else (fields[0], fields[1], fields[2], fields[4]))
        if p_type == 1:   # PT_LOAD
            if p_offset + p_filesz > st.st_size:
                raise NotElf("truncated (a loadable segment ends beyond the end of the file)")
            segs.append((p_offset, p_vaddr, p_filesz))
    if not segs:
        raise NotElf("no loadable segments")
    return segs


def offset_to_vaddr(segs, offset):
    """addr2line wants the link-time address; a file offset maps through its PT_LOAD segment."""
    for p_offset, p_vaddr, p_filesz in segs:
        if p_offset <= offset < p_offset + p_filesz:
            return offset - p_offset + p_vaddr
    return offset


def parse_addr2line(out):
    """`addr2line -a -f -i` output -> {vaddr: [(function, 'file:line'), ...innermost first]}."""
    result, current, lines = {}, None, out.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.fullmatch(r"0x[0-9a-fA-F]{1,16}", line):
            current = int(line, 16)
            result[current] = []
            i += 1
            continue
        if current is not None and i + 1 < len(lines):
            result[current].append((line, lines[i + 1]))
        i += 2
    return result


class Symbolizer:
    """Batches (file, offset) lookups: addr2line per file, in bounded batches and time."""

    def __init__(self, budget_s=SYMBOLIZE_BUDGET_S):
        self.pending = {}     # path -> set(offset)
        self.done = {}        # (path, offset) -> frame dict
        self.budget_s = budget_s
        self.deadline = None
        self.stopped = None   # why addr2line is not run any more, once said

    def want(self, path, offset):
        if path is not None:
            self.pending.setdefault(path, set()).add(offset)

    def resolve(self):
        self.deadline = time.monotonic() + self.budget_s
        busiest = sorted(self.pending, key=lambda p: (-len(self.pending[p]), p))
        missing, unsymbolized = 0, len(busiest[MAX_SYMBOLIZED_FILES:])
        for rank, path in enumerate(busiest):
            answers, vaddr = {}, {}
            if rank < MAX_SYMBOLIZED_FILES:
                try:
                    segs = elf_load_segments(path)
                except NotElf as e:
                    segs = None
                    if "\0" not in path and not os.path.lexists(path):
                        missing += 1     # another machine's file: common, said once below
                    else:
                        warn(f"report: {path}: {e}: skipped, its addresses are shown as file+offset")
                if segs:
                    # A return address: the call is the byte before it.
                    vaddr = {off: offset_to_vaddr(segs, max(off - 1, 0)) for off in self.pending[path]}
                    answers = self.addr2line(path, sorted(set(vaddr.values())))
            for off in self.pending[path]:
                self.done[(path, off)] = self.frame(path, off, answers.get(vaddr.get(off), []))
        if missing:
            warn(f"report: {missing} mapped file(s) not found here: their addresses are shown as file+offset")
        if unsymbolized:
            warn(f"report: {unsymbolized} more mapped files not symbolized (at most "
                 f"{MAX_SYMBOLIZED_FILES} per report, those with the most addresses)")
        self.pending = {}

    def addr2line(self, path, vaddrs):
        answers = {}
        for at in range(0, len(vaddrs), MAX_ADDRS_PER_RUN):
            if self.stopped:
                break
            left = self.deadline - time.monotonic()
            if left <= 0 and self.budget_s <= 0:
                self.stopped = "no symbols asked"
                break
            if left <= 0:
                self.stop(f"symbolization took its whole budget ({self.budget_s:g} s); "
                          "the remaining addresses are shown as file+offset")
                break
            batch = vaddrs[at:at + MAX_ADDRS_PER_RUN]
            cmd = ["addr2line", "-a", "-f", "-C", "-i", "-e", path] + [hex(a) for a in batch]
            try:
                out = subprocess.run(cmd, capture_output=True, timeout=min(ADDR2LINE_TIMEOUT_S, left)).stdout
            except FileNotFoundError:
                self.stop("addr2line not found (binutils): addresses are shown as file+offset")
                break
            except subprocess.TimeoutExpired:
                warn(f"report: {path}: addr2line timed out: its addresses are shown as file+offset")
                break
            except (OSError, ValueError, subprocess.SubprocessError) as e:
                warn(f"report: {path}: addr2line failed ({e}): its addresses are shown as file+offset")
                break
            answers.update(parse_addr2line(out.decode("utf-8", errors="replace")))
        return answers

    def stop(self, why):
        self.stopped = why
        warn(f"report: {why}")

    @staticmethod
    def frame(path, offset, frames):
        inlined = []
        for fn, where in frames:
            fn = None if fn == "??" else fn
            where = None if where.startswith("??") else re.sub(r" \(discriminator \d+\)$", "", where)
            if fn or where:
                inlined.append({"function": fn, "source": where})
        return {"module": path, "offset": offset,
                "function": inlined[-1]["function"] if inlined else None,
                "source": inlined[-1]["source"] if inlined else None,
                # innermost first; the last entry is the real (non-inlined) function
                "inlined": inlined[:-1]}

    def get(self, path, offset):
        if path is None:
            return {"module": None, "offset": offset, "function": None, "source": None, "inlined": []}
        return self.done[(path, offset)]


def frame_text(fr, addr=None):
    """'function (file.c:12)', 'function [lib.so+0x1f0]' or 'lib.so+0x1f0'; inlined callees first."""
    where = (f"{os.path.basename(fr['module'])}+{fr['offset']:#x}" if fr["module"]
             else f"{addr if addr is not None else fr['offset']:#x}")
    if fr["function"] and fr["source"]:
        text = f"{fr['function']} ({os.path.basename(fr['source'])})"
    elif fr["function"]:
        text = f"~{fr['function']} [{where}]"  # no line info: nearest symbol only
    else:
        text = where
    inlined = [f"{i['function'] or '??'} ({os.path.basename(i['source'] or '??')})" for i in fr["inlined"]]
    return shown(", inlined in ".join(inlined + [text]))
