#!/usr/bin/python3
"""lockswap report / lockswap compare — the Python half of the `lockswap` command.

tools/lockswap.in (the bash wrapper) dispatches `lockswap report ...` and
`lockswap compare ...` here, passing its own path with --wrapper so compare can
run each variant through it. Standard library only (argparse, json, csv,
subprocess); matplotlib is imported only for --png and its absence is reported,
not fatal. The statistics file format is the library's contract, version 1
(lockswap-v1 records, see `lockswap report --help`).
"""

import argparse
import bisect
import csv
import json
import math
import os
import re
import shlex
import signal
import statistics
import struct
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from stat import S_ISREG

PROG = "lockswap"
RECORD_PREFIX = "lockswap-v1 "
HIST_BUCKETS = 48             # log2 buckets of nanoseconds, i = 0..47
FAMILIES = ("mutex", "rwlock", "cond", "sem")
VARIANT_KEYS = ("mutex", "rwlock", "sem", "cid")
SORT_KEYS = ("wait", "contended", "hold", "acq")
PERCENTILE_NOTE = ("percentiles (p50, p99) come from log2 histograms: the value shown is the upper "
                   "bound 2^(i+1)-1 ns of the bucket holding that rank, capped at the observed max, "
                   "so it over-states by at most 2x")
HIDDEN_FRAME_PREFIX = "liblockswap"   # the library's own frames say nothing about the program
COUNTERS = ("acq", "contended", "rd_acq", "rd_contended")


def shown(text):
    """TEXT for a terminal: control characters and undecodable bytes (surrogate-escaped) as
    backslash escapes, so a file name with a newline cannot break a table or forge a line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def warn(msg):
    print(shown(f"{PROG}: {msg}"), file=sys.stderr)


# --------------------------------------------------------------------------
# Statistics file parsing (format version 1)
#
# Input is untrusted: any file may be truncated, corrupted or hostile. Every
# number must be a u64 (anything else: the record is skipped with a warning
# naming file:line), text fields are shown escaped, a path is a byte string.
# --------------------------------------------------------------------------

U64_LIMIT = 1 << 64
MAX_NUMBER_CHARS = 40           # a u64 needs at most 20 digits (18 chars in hex): longer is junk
MAX_BACKTRACE = 64              # frames kept per site (the library writes at most 16)
MAX_WARNINGS_PER_FILE = 10
MAX_LOCKS_PER_SITE = 64         # lock addresses listed per call site


class BadRecord(ValueError):
    """A record whose fields cannot be what the writer wrote."""


def parse_number(text):
    """Decimal unless prefixed 0x (the format's rule); None unless a u64."""
    if not text or len(text) > MAX_NUMBER_CHARS:
        return None
    try:
        n = int(text, 16) if text[:2].lower() == "0x" else int(text, 10)
    except ValueError:
        return None
    return n if 0 <= n < U64_LIMIT else None


def need_u64(fields, key):
    """FIELDS[KEY] as a u64 (0 when absent), or BadRecord."""
    text = fields.get(key)
    if text is None:
        return 0
    n = parse_number(text)
    if n is None:
        raise BadRecord(f"{key}={text[:24]}{'...' if len(text) > 24 else ''} is not a number in 0..2^64-1")
    return n


def parse_hist(text):
    """"i:count;i:count" or "-" -> list of HIST_BUCKETS counts; bad entries are skipped."""
    hist = [0] * HIST_BUCKETS
    if not text or text == "-":
        return hist
    for item in text.split(";", 4 * HIST_BUCKETS)[:4 * HIST_BUCKETS]:
        idx, _, count = item.partition(":")
        i, n = parse_number(idx), parse_number(count)
        if i is not None and n is not None and i < HIST_BUCKETS:
            hist[i] += n
    return hist


_PERCENT_XX = re.compile(rb"%([0-9A-Fa-f]{2})")


def unescape_path(text):
    """A path as the writer percent-encoded it (%XX for bytes <= 0x20, '%' and 0x7f; older
    dumps wrote only %20) -> the file name, decoded as the OS decodes names (bytes that are not
    UTF-8 stay surrogate-escaped, so the name still opens the file)."""
    raw = _PERCENT_XX.sub(lambda m: bytes((int(m.group(1), 16),)), text.encode("utf-8", "surrogateescape"))
    return os.fsdecode(raw)


def parse_record(line):
    """'lockswap-v1 TYPE k=v ...' anywhere in LINE -> (TYPE, {k: v}) or None."""
    at = line.find(RECORD_PREFIX)
    if at < 0:
        return None
    words = line[at + len(RECORD_PREFIX):].split()
    if not words:
        return None
    fields = {}
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if eq:
            fields[key] = value
    return words[0], fields


def stat_fields(f):
    """The counters and wait/hold sides shared by lock and site records, validated."""
    out = {k: need_u64(f, k) for k in COUNTERS}
    for side in ("wait", "hold"):
        out[side] = {"total_ns": need_u64(f, f"{side}_ns"), "max_ns": need_u64(f, f"{side}_max_ns"),
                     "hist": parse_hist(f.get(f"{side}_hist", "-"))}
    return out


def backtrace(text):
    ips = (parse_number(x) for x in text.split(",", MAX_BACKTRACE)[:MAX_BACKTRACE])
    return [ip for ip in ips if ip]


class Dump:
    """One complete (or truncated) statistics snapshot of one process."""

    def __init__(self, fields, path, order):
        self.pid = parse_number(fields.get("pid", "")) or 0
        self.seq = parse_number(fields.get("seq", "")) or 0
        self.start_ns = parse_number(fields.get("start_ns", "")) or 0
        self.now_ns = parse_number(fields.get("now_ns", "")) or 0
        self.variants = {k: fields.get(k, "?") for k in VARIANT_KEYS}
        # counts: event counters only, the per-lock profiler was off (older dumps: profile)
        self.stats = fields.get("stats", "profile")
        self.exe = unescape_path(fields.get("exe", "?"))
        self.path = path
        self.order = order            # position among all dumps read: later wins ties
        self.complete = False
        self.calls = {}
        self.events = {}
        self.locks = {}               # lock id -> validated lock record
        self.sites = []
        self.maps = []                # (start, end, offset, path), sorted by start for locate()
        self.dropped = {"locks": 0, "sites": 0}

    @property
    def key(self):
        return (self.pid, self.start_ns)

    def add(self, rtype, f):
        """Add one record; BadRecord when its fields are malformed (nothing is added then)."""
        if rtype == "calls" and "family" in f:
            self.calls[f["family"]] = self.calls.get(f["family"], 0) + need_u64(f, "calls")
        elif rtype == "event" and "name" in f:
            self.events[f["name"]] = self.events.get(f["name"], 0) + need_u64(f, "count")
        elif rtype == "lock" and "id" in f:
            self.locks[f["id"]] = {"addr": need_u64(f, "addr"), "kind": f.get("kind", "?"), **stat_fields(f)}
        elif rtype == "site":
            self.sites.append({"ip": need_u64(f, "ip"), "op": f.get("op", "?"), "lock": f.get("lock"),
                               "bt": backtrace(f.get("bt", "")), **stat_fields(f)})
        elif rtype == "map":
            if "start" not in f or "end" not in f or "path" not in f:
                raise BadRecord("map record without start, end or path")
            self.maps.append((need_u64(f, "start"), need_u64(f, "end"), need_u64(f, "offset"),
                              unescape_path(f["path"])))
        elif rtype == "dropped":
            counts = {k: need_u64(f, k) for k in ("locks", "sites")}
            for k, n in counts.items():
                self.dropped[k] += n
        # anything else: a newer writer's record, ignored by contract


class DumpReader:
    """Reads statistics files; a malformed record is skipped with a warning naming file:line,
    an unreadable file with a warning naming the file."""

    def __init__(self):
        self.dumps, self.order = [], 0

    def read(self, path):
        current, warnings = None, 0
        try:
            with open(path, "r", encoding="utf-8", errors="surrogateescape") as fh:
                for lineno, line in enumerate(fh, 1):
                    rec = parse_record(line)
                    if rec is None:
                        continue
                    try:
                        current = self.record(current, path, *rec)
                    except BadRecord as e:
                        warnings += 1
                        if warnings <= MAX_WARNINGS_PER_FILE:
                            warn(f"report: {path}:{lineno}: {rec[0]} record skipped: {e}")
        except (OSError, ValueError) as e:
            warn(f"report: {path}: {getattr(e, 'strerror', None) or e}")
        if warnings > MAX_WARNINGS_PER_FILE:
            warn(f"report: {path}: {warnings - MAX_WARNINGS_PER_FILE} more malformed records skipped")
        if current is not None:
            self.dumps.append(current)

    def record(self, current, path, rtype, fields):
        """Feed one record to the dump being read; returns the dump being read next."""
        if rtype == "begin":
            if current is not None:
                self.dumps.append(current)      # truncated: kept, marked incomplete
            self.order += 1
            return Dump(fields, path, self.order - 1)
        if rtype == "end":
            if current is not None:
                current.complete = True
                self.dumps.append(current)
            return None
        if current is not None:
            current.add(rtype, fields)
        return current


def read_dumps(paths):
    """All dumps in PATHS, in file order. Records outside begin..end are ignored."""
    reader = DumpReader()
    for path in paths:
        reader.read(path)
    for d in reader.dumps:
        d.maps.sort()
    return reader.dumps


def last_dump_per_process(dumps):
    """The newest snapshot of each (pid, start_ns): complete over truncated, then highest seq,
    then the one read last."""
    best = {}
    for d in dumps:
        rank = (d.complete, d.seq, d.order)
        if d.key not in best or rank > best[d.key][0]:
            best[d.key] = (rank, d)
    return sorted((d for _, d in best.values()), key=lambda d: (d.start_ns, d.pid))


# --------------------------------------------------------------------------
# Address -> (file, offset) -> symbol
#
# The mapped files are untrusted too (another machine's, replaced since, or
# crafted): one that is not a regular, complete ELF file is skipped with a
# warning, and addr2line runs are bounded in number of files, addresses per
# run, time per run and time in all.
# --------------------------------------------------------------------------

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


# --------------------------------------------------------------------------
# Merging
# --------------------------------------------------------------------------

def new_side():
    return {"total_ns": 0, "max_ns": 0, "hist": [0] * HIST_BUCKETS}


def add_side(side, rec):
    side["total_ns"] += rec["total_ns"]
    side["max_ns"] = max(side["max_ns"], rec["max_ns"])
    for i, n in enumerate(rec["hist"]):
        side["hist"][i] += n


def percentile(hist, q, max_ns):
    total = sum(hist)
    if total == 0:
        return 0
    rank, seen = max(1, math.ceil(q * total)), 0
    for i, n in enumerate(hist):
        seen += n
        if seen >= rank:
            upper = (1 << (i + 1)) - 1
            return min(upper, max_ns) if max_ns else upper
    return max_ns


def finish_side(side, fallback_count):
    count = sum(side["hist"]) or fallback_count
    side["count"] = count
    side["avg_ns"] = side["total_ns"] // count if count else 0
    side["p50_ns"] = percentile(side["hist"], 0.50, side["max_ns"])
    side["p99_ns"] = percentile(side["hist"], 0.99, side["max_ns"])
    return side


def new_stat(**ident):
    stat = dict(ident)
    stat.update({k: 0 for k in COUNTERS})
    stat.update({"pids": [], "_pids": set(), "wait": new_side(), "hold": new_side()})
    return stat


def add_stat(stat, rec, pid):
    for k in COUNTERS:
        stat[k] += rec[k]
    add_side(stat["wait"], rec["wait"])
    add_side(stat["hold"], rec["hold"])
    if pid not in stat["_pids"]:      # a set beside the list: many processes stay linear
        stat["_pids"].add(pid)
        stat["pids"].append(pid)


def finish_stat(stat):
    del stat["_pids"]
    stat["contended_pct"] = round(100.0 * stat["contended"] / stat["acq"], 2) if stat["acq"] else 0.0
    finish_side(stat["wait"], stat["contended"])
    finish_side(stat["hold"], 0)
    return stat


def merge(dumps):
    """Processes' snapshots -> totals, locks and sites. Locks at the same address in processes of
    the same executable are summed (forked workers inherit their parent's objects); sites are
    summed by (file, offset, op), i.e. by code location, across processes."""
    totals = {"calls": {f: 0 for f in FAMILIES}, "events": {}, "dropped": {"locks": 0, "sites": 0}}
    locks, sites = {}, {}
    for d in dumps:
        for fam, n in d.calls.items():
            totals["calls"][fam] = totals["calls"].get(fam, 0) + n
        for name, n in d.events.items():
            totals["events"][name] = totals["events"].get(name, 0) + n
        for k, n in d.dropped.items():
            totals["dropped"][k] += n
        for rec in d.locks.values():
            key = (d.exe, rec["addr"], rec["kind"])
            if key not in locks:
                locks[key] = new_stat(addr=rec["addr"], kind=rec["kind"], exe=d.exe)
            add_stat(locks[key], rec, d.pid)
        for rec in d.sites:
            merge_site(sites, d, rec)
    for stat in list(locks.values()) + list(sites.values()):
        finish_stat(stat)
    return totals, list(locks.values()), list(sites.values())


def merge_site(sites, d, rec):
    ip, op = rec["ip"], rec["op"]
    module, offset = locate(d.maps, ip)
    key = (module or d.exe, offset, op) if module else (d.exe, ip, op, "unmapped")
    if key not in sites:
        sites[key] = new_stat(ip=ip, op=op, module=module, offset=offset, lock_addrs=[],
                              lock_kind=None, bt=[], bt_pid=None)
    s = sites[key]
    add_stat(s, rec, d.pid)
    lock = d.locks.get(rec["lock"])
    if lock is not None:
        s["lock_kind"] = s["lock_kind"] or lock["kind"]
        if len(s["lock_addrs"]) < MAX_LOCKS_PER_SITE and lock["addr"] not in s["lock_addrs"]:
            s["lock_addrs"].append(lock["addr"])
    if rec["bt"] and not s["bt"]:
        s["bt"] = [(ip_, *locate(d.maps, ip_)) for ip_ in rec["bt"]]
        s["bt_pid"] = d.pid


def sort_key(name):
    return {"wait": lambda s: (s["wait"]["total_ns"], s["contended"]),
            "contended": lambda s: (s["contended"], s["wait"]["total_ns"]),
            "hold": lambda s: (s["hold"]["total_ns"], s["acq"]),
            "acq": lambda s: (s["acq"], s["contended"])}[name]


def site_frames(site, symbolizer):
    """The site's location, then its sampled backtrace (library frames dropped)."""
    where = symbolizer.get(site["module"], site["offset"])
    where["addr"] = site["ip"]
    frames = []
    for ip, mod, off in site["bt"]:
        if mod and os.path.basename(mod).startswith(HIDDEN_FRAME_PREFIX):
            continue
        fr = dict(symbolizer.get(mod, off))
        fr["addr"] = ip
        frames.append(fr)
    return where, frames


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------

REPORT_EPILOG = f"""\
Input: files written by the library with LOCKSWAP_STATS=profile (`{PROG} --profile`;
counts-only dumps, LOCKSWAP_STATS=counts, give the calls and events only) and
LOCKSWAP_STATS_FILE (`%p` in the name gives one file per process), or captured
stderr. Paths are percent-decoded (%XX). Lines that
are not `lockswap-v1` records are skipped, as are unknown record types and keys.
The last dump of each process (pid + start time; a dump on the statistics signal
and another at exit) is used; processes are summed into totals.

Times: wait = start of a contended acquisition to success (so its average is
over contended acquisitions); hold = acquisition to release of exclusive holds.
{PERCENTILE_NOTE}.
Backtraces are symbolized with `addr2line -f -C -i` on the files named by the
dump's `map` records; a file without debug info gives a function name only, a
missing file gives file+offset. Input is untrusted: a malformed record is
skipped with a warning naming file:line, a mapped file that is not a complete
ELF file is skipped with a warning, and addr2line is bounded: only the sites
shown, at most {MAX_SYMBOLIZED_FILES} files, {MAX_ADDRS_PER_RUN} addresses a run,
{ADDR2LINE_TIMEOUT_S:g} s a run and --symbol-budget in all.

--json schema ("schema": "lockswap-report-v1"): files; percentile_method;
profiled (false: counts-only dumps, no per-lock data);
processes[] {{pid, start_ns, seq, complete, file, exe, variants{{mutex,rwlock,sem,cid}},
stats (counts|profile), calls{{family: n}}, events{{name: n}}, dropped{{locks, sites}}, acq, contended}};
totals {{processes, calls, events, dropped, acq, contended}};
locks_total, sites_total (before --top); sort;
locks[] {{addr, kind, exe, pids[], acq, contended, contended_pct, rd_acq,
rd_contended, wait, hold}}; sites[] {{rank, op, addr, module, offset, lock_addrs[],
lock_kind, pids[], acq, contended, contended_pct, wait, hold, where, backtrace[],
backtrace_pid}}; cond_locks[], cond_sites[] (same shapes: condition
variables and their wait sites, ranked apart because a condition wait is idle
time, not contention), cond_locks_total, cond_sites_total. wait/hold = {{count, total_ns, avg_ns, p50_ns, p99_ns, max_ns,
hist[48]}} with hist[i] = samples in [2^i, 2^(i+1)) ns (bucket 0 also holds 0).
A frame (where, backtrace[]) = {{addr, module, offset, function, source,
inlined[]}}; function/source are null when unknown.

examples:
  {PROG} --stats-file /tmp/st.%p -- ./server ...; {PROG} report /tmp/st.*
  {PROG} report --top 5 --sort contended --png waits.png /tmp/st.*
  {PROG} report --json /tmp/st.* | jq '.sites[0].where'
"""


def report_parser():
    p = argparse.ArgumentParser(
        prog=f"{PROG} report", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Merge lockswap statistics files (one per process) into a table of the "
                    "most contended locks and call sites, in the spirit of mutrace and "
                    "/proc/lock_stat.", epilog=REPORT_EPILOG)
    p.add_argument("files", nargs="+", metavar="FILE", help="statistics file(s)")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="locks and sites to show (default 10; 0 = all)")
    p.add_argument("--sort", choices=SORT_KEYS, default="wait",
                   help="rank by total wait time (default), contended acquisitions, "
                        "total hold time or acquisitions")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--png", metavar="FILE", help="plot the wait-time histograms of the top sites")
    p.add_argument("--per-process", action="store_true",
                   help="list every process (default: only when there are at most 16)")
    p.add_argument("--symbol-budget", type=float, default=SYMBOLIZE_BUDGET_S, metavar="S",
                   help=f"seconds addr2line may take in all (default {SYMBOLIZE_BUDGET_S:g}; 0: no symbols)")
    return p


def fmt_ns(ns):
    if ns < 1000:
        return f"{ns}ns"
    for unit, scale in (("us", 1e3), ("ms", 1e6), ("s", 1e9)):
        v = ns / scale
        if v < 1000 or unit == "s":
            return f"{v:.3g}{unit}" if v < 100 else f"{v:.0f}{unit}"
    return f"{ns}ns"


def variant_text(v):
    return " ".join(f"{k}={v[k]}" for k in VARIANT_KEYS)


def build_report(args):
    dumps = last_dump_per_process(read_dumps(args.files))
    totals, locks, sites = merge(dumps)
    key = sort_key(args.sort)
    locks.sort(key=key, reverse=True)
    sites.sort(key=key, reverse=True)
    top = args.top if args.top > 0 else None
    # A condition wait is idle time, not contention: ranked on its own.
    cond_locks = [s for s in locks if s["kind"] == "cond"]
    locks = [s for s in locks if s["kind"] != "cond"]
    cond_sites = [s for s in sites if is_cond_site(s)]
    sites = [s for s in sites if not is_cond_site(s)]
    symbolizer = Symbolizer(args.symbol_budget)
    for s in sites[:top] + cond_sites[:top]:   # only what is shown: addr2line is the slow part
        symbolizer.want(s["module"], s["offset"])
        for _, mod, off in s["bt"]:
            symbolizer.want(mod, off)
    symbolizer.resolve()
    procs = []
    for d in dumps:
        lock_vals = d.locks.values()
        procs.append({"pid": d.pid, "start_ns": d.start_ns, "seq": d.seq, "complete": d.complete,
                      "file": d.path, "exe": d.exe, "variants": d.variants,
                      "calls": {f: d.calls.get(f, 0) for f in sorted(set(FAMILIES) | set(d.calls))},
                      "events": d.events, "dropped": d.dropped,
                      "stats": d.stats,
                      "acq": sum(rec["acq"] for rec in lock_vals),
                      "contended": sum(rec["contended"] for rec in lock_vals)})
    totals.update(processes=len(procs), acq=sum(p["acq"] for p in procs),
                  contended=sum(p["contended"] for p in procs))
    # counts-only dumps (LOCKSWAP_STATS=counts) carry events and calls, no per-lock records
    profiled = bool(locks or sites or cond_locks or cond_sites or any(d.stats != "counts" for d in dumps))
    return {"schema": "lockswap-report-v1", "files": args.files, "percentile_method": PERCENTILE_NOTE,
            "sort": args.sort, "profiled": profiled, "processes": procs, "totals": totals,
            "locks_total": len(locks), "sites_total": len(sites),
            "cond_locks_total": len(cond_locks), "cond_sites_total": len(cond_sites),
            "locks": locks[:top], "sites": out_sites(sites[:top], symbolizer),
            "cond_locks": cond_locks[:top], "cond_sites": out_sites(cond_sites[:top], symbolizer)}


def is_cond_site(site):
    return site["lock_kind"] == "cond" or (site["lock_kind"] is None and site["op"] == "wait")


def out_sites(sites, symbolizer):
    result = []
    for rank, s in enumerate(sites, 1):
        where, frames = site_frames(s, symbolizer)
        result.append({"rank": rank, "op": s["op"], "addr": s["ip"], "module": s["module"],
                       "offset": s["offset"], "lock_addrs": s["lock_addrs"],
                       "lock_kind": s["lock_kind"], "pids": s["pids"],
                       **{k: s[k] for k in COUNTERS}, "contended_pct": s["contended_pct"],
                       "wait": s["wait"], "hold": s["hold"], "where": where,
                       "backtrace": frames, "backtrace_pid": s["bt_pid"]})
    return result


def side_cols(side):
    return [fmt_ns(side["total_ns"]), fmt_ns(side["avg_ns"]), fmt_ns(side["p50_ns"]),
            fmt_ns(side["p99_ns"]), fmt_ns(side["max_ns"])]


def table(rows, right_from=0):
    rows = [[shown(c) for c in r] for r in rows]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [c.rjust(w) if i >= right_from else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def header_lines(rep):
    procs, totals = rep["processes"], rep["totals"]
    out = [f"lockswap report: {len(rep['files'])} file(s), {len(procs)} process(es)"
           + (f" (pids {', '.join(str(p['pid']) for p in procs[:12])}"
              + (", ..." if len(procs) > 12 else "") + ")" if procs else "")]
    variants = {}
    for p in procs:
        variants.setdefault(variant_text(p["variants"]), []).append(p["pid"])
    for text, pids in variants.items():
        out.append(f"  variants: {shown(text)}  ({len(pids)} process(es))")
    calls = totals["calls"]
    out.append("  calls: " + shown(", ".join(f"{f} {calls.get(f, 0)}" for f in calls)))
    if procs and all(calls.get(f, 0) == 0 for f in ("mutex", "rwlock", "cond")):
        out.append("  no pthread/C11 lock calls at all (mutex, rwlock, cond = 0): "
                   "the mutex and rwlock variants cannot change this program")
    else:
        idle = [f for f in FAMILIES if calls.get(f, 0) == 0]
        if procs and idle:
            out.append(f"  no calls of: {', '.join(idle)}")
    out.append(f"  lock objects: {rep['locks_total']} (+{rep['cond_locks_total']} condition variables), "
               f"call sites: {rep['sites_total']} (+{rep['cond_sites_total']} condition waits), "
               f"acquisitions {totals['acq']}, contended {totals['contended']}")
    dropped = totals["dropped"]
    if dropped["locks"] or dropped["sites"]:
        out.append(f"  DROPPED (tables full, not in this report): {dropped['locks']} locks, "
                   f"{dropped['sites']} sites")
    incomplete = [p["pid"] for p in procs if not p["complete"]]
    if incomplete:
        out.append(f"  truncated dumps (no end record) used for pids {incomplete}")
    out += textwrap.wrap(PERCENTILE_NOTE, width=100, initial_indent="  ", subsequent_indent="    ")
    return out


def process_lines(rep):
    rows = [["pid", "exe", "variants", *FAMILIES, "acq", "contended", "file"]]
    for p in rep["processes"]:
        rows.append([p["pid"], os.path.basename(p["exe"]), variant_text(p["variants"]),
                     *[p["calls"].get(f, 0) for f in FAMILIES], p["acq"], p["contended"], p["file"]])
    return ["", "processes:"] + table(rows, right_from=3)


def event_lines(rep):
    events = rep["totals"]["events"]
    if not events:
        return ["", "lock events: none (only slow-path events are counted; glibc counts none)"]
    rows = [[name, n] for name, n in sorted(events.items(), key=lambda kv: -kv[1])]
    return ["", "lock events (all processes):"] + table(rows, right_from=1)


TIME_HEAD = ["total", "avg", "p50", "p99", "max"]


def lock_lines(rep):
    if not rep["locks"]:
        return ["", "locks: none recorded"]
    rows = [["addr", "kind", "procs", "acq", "contended", "%cont", *[f"wait.{h}" for h in TIME_HEAD],
             *[f"hold.{h}" for h in TIME_HEAD]]]
    for s in rep["locks"]:
        rows.append([f"{s['addr']:#x}", s["kind"], len(s["pids"]), s["acq"], s["contended"],
                     f"{s['contended_pct']:.1f}", *side_cols(s["wait"]), *side_cols(s["hold"])])
    return ["", f"top {len(rep['locks'])} of {rep['locks_total']} locks by {rep['sort']}:"] + \
        table(rows, right_from=2)


def cond_lines(rep):
    """Condition waits are idle time (a thread waiting for work), so they are not ranked with
    contention; shown with their wait-time columns only."""
    if not rep["cond_sites"]:
        return []
    rows = [["#", "site", "cond", "waits", *[f"wait.{h}" for h in TIME_HEAD]]]
    for s in rep["cond_sites"]:
        lock = ",".join(f"{a:#x}" for a in s["lock_addrs"][:2])
        rows.append([s["rank"], site_name(s), lock or "?", s["acq"], *side_cols(s["wait"])])
    return ["", f"condition waits (idle time, not contention; top {len(rep['cond_sites'])} of "
                f"{rep['cond_sites_total']} by {rep['sort']}):"] + table(rows, right_from=3)


def site_name(s):
    fr = s["where"]
    nearest = fr["function"] and not fr["source"]  # no debug info: the nearest (exported) symbol
    return ((("~" if nearest else "") + fr["function"] if fr["function"] else None) or
            (f"{os.path.basename(fr['module'])}+{fr['offset']:#x}"
                               if fr["module"] else f"{s['addr']:#x}"))[:48]


def site_lines(rep):
    if not rep["sites"]:
        return ["", "call sites: none recorded"]
    out = ["", f"top {len(rep['sites'])} of {rep['sites_total']} call sites by {rep['sort']}:"]
    rows = [["#", "site", "op", "lock", "acq", "contended", "%cont",
             *[f"wait.{h}" for h in TIME_HEAD], *[f"hold.{h}" for h in TIME_HEAD]]]
    for s in rep["sites"]:
        name = site_name(s)
        lock = ",".join(f"{a:#x}" for a in s["lock_addrs"][:2]) + ("..." if len(s["lock_addrs"]) > 2 else "")
        rows.append([s["rank"], name, s["op"], lock or "?", s["acq"], s["contended"],
                     f"{s['contended_pct']:.1f}", *side_cols(s["wait"]), *side_cols(s["hold"])])
    out += table(rows, right_from=4)
    out += ["", "call sites with backtraces (innermost first; ~name: no debug info there, the nearest "
            "symbol, which may not be the real function):"]
    for s in rep["sites"]:
        out.append(f"  #{s['rank']} {shown(s['op'])} at {frame_text(s['where'], s['addr'])}  "
                   f"[{s['addr']:#x}]")
        if s["backtrace"]:
            out.append(f"     sampled backtrace (pid {s['backtrace_pid']}):")
            for fr in s["backtrace"]:
                out.append(f"       {fr['addr']:#014x} {frame_text(fr, fr['addr'])}")
        else:
            out.append("     (no backtrace sampled: backtraces are taken on contended acquisitions)")
    return out


NO_PROFILE_LINE = ("no per-lock data: the profiler was off (run with LOCKSWAP_STATS=profile / "
                   f"{PROG} --profile)")


def text_report(rep, per_process):
    out = header_lines(rep)
    if per_process or len(rep["processes"]) <= 16:
        out += process_lines(rep)
    out += event_lines(rep)
    if rep["profiled"]:
        out += lock_lines(rep) + site_lines(rep) + cond_lines(rep)
    else:
        out += ["", NO_PROFILE_LINE]
    return "\n".join(out)


def import_pyplot():
    """matplotlib's pyplot with a file-only backend, or (None, reason)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt, None
    except ImportError as e:
        return None, f"matplotlib is not available for {sys.executable} ({e}); " \
                     "install python3-matplotlib (scripts/setup.sh does)"


def report_png(rep, path):
    plt, why = import_pyplot()
    if plt is None:
        warn(f"report: PNG {path} skipped: {why}")
        return
    sites = [s for s in rep["sites"] if sum(s["wait"]["hist"])][:8]
    fig, ax = plt.subplots(figsize=(10, 5.5))
    if not sites:
        ax.text(0.5, 0.5, "no contended acquisitions recorded", ha="center", va="center")
    for s in sites:
        hist = s["wait"]["hist"]
        total = sum(hist)
        xs = [1 << i for i in range(HIST_BUCKETS)]
        name = site_name(s)
        ax.step(xs, [100.0 * n / total for n in hist], where="post",
                label=f"#{s['rank']} {name[:40]} {s['op']} (n={total}, total {fmt_ns(s['wait']['total_ns'])})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("wait time, ns (log2 buckets: [2^i, 2^(i+1)))")
    ax.set_ylabel("% of the site's contended acquisitions")
    ax.set_title(f"lockswap: wait-time distribution of the top call sites ({len(rep['processes'])} processes)")
    if sites:
        lo = min(min(i for i, n in enumerate(s["wait"]["hist"]) if n) for s in sites)
        hi = max(max(i for i, n in enumerate(s["wait"]["hist"]) if n) for s in sites)
        ax.set_xlim(1 << max(lo - 1, 0), 1 << min(hi + 2, HIST_BUCKETS))
        ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"{PROG}: report: wrote {path}", file=sys.stderr)


def write_json(rep, out):
    """REP as JSON: one top-level key a line, a list's items one a line. Each value goes through
    the C encoder (json's indent= runs the pure-Python one: minutes for 100k sites). ASCII only:
    undecodable bytes of names come out as \\udcXX."""
    out.write("{\n")
    for i, (key, value) in enumerate(rep.items()):
        sep = "," if i + 1 < len(rep) else ""
        if isinstance(value, list) and value:
            items = ",\n  ".join(json.dumps(v) for v in value)
            out.write(f" {json.dumps(key)}: [\n  {items}\n ]{sep}\n")
        else:
            out.write(f" {json.dumps(key)}: {json.dumps(value)}{sep}\n")
    out.write("}\n")


def cmd_report(argv):
    args = report_parser().parse_args(argv)
    rep = build_report(args)
    if not rep["processes"]:
        raise SystemExit(shown(f"{PROG} report: no lockswap-v1 statistics found in {', '.join(args.files)} "
                               "(run with --stats and --stats-file)"))
    if args.json:
        write_json(rep, sys.stdout)
    else:
        # surrogate-escaped bytes of file names left in the text: as \xNN, never an encoding error
        print(text_report(rep, args.per_process).encode("utf-8", "backslashreplace").decode("utf-8"))
    if args.png:
        report_png(rep, args.png)
    return 0


# --------------------------------------------------------------------------
# compare
# --------------------------------------------------------------------------

REFERENCE = "none"   # the command as it is: no LD_PRELOAD, no LOCKSWAP_* variable

COMPARE_EPILOG = f"""\
Rows: `none` (COMMAND run as it is: no LD_PRELOAD, no LOCKSWAP_* variable; the
reference unless --baseline names another row), `glibc` (through lockswap with
glibc's own locks: what the interposition alone costs) and the listed variants;
none and glibc are added when not listed (--no-glibc leaves glibc out).

Rounds: each repetition is a round that runs every row once, in the listed order
rotated by the round's number, so drift (a warming cache, a noisy neighbour)
does not always hit the same row. Before and after each round the core-to-core
probe (`lockswap-probe c2c`, next to the lockswap command; --probe PATH) is
read; a round whose two readings differ by more than lockswap_stats.PROBE_TOLERANCE
(the host moved the vCPUs) is dropped, unless --keep-unsteady, and the table
says how many rounds were kept. Without the probe every round counts.

Verdicts: per kept round the ratio row/reference; a row's ratio is the median of
those, with the sign test's distribution-free confidence interval (--level,
95% by default), stated as hyperfine does: "rwsem is 1.23 [1.19, 1.27] times
faster than none". A difference is called only when the interval excludes 1:
faster, slower, no significant difference, or "not enough runs" when there are
too few rounds for the level at all (fewer than 6 for 95%: the default --repeat).

Every row runs in an environment computed once by the lockswap command
(`{PROG} [--lib L] <variant options> [--set ...] -- env -0`), so every row,
none included, starts COMMAND the same way. LOCKSWAP_* variables of the calling
environment are not passed on: settings come from --set only. Measured runs
never run the profiler: --stats gives them counts-only statistics (contract:
LOCKSWAP_STATS=counts, files in --stats-dir); --profile-run adds one separate
run per row under the profiler, labelled "profile", never in the table, and
prints where its dump is for `{PROG} report`.

Variants: the names of `{PROG} --variant` (glibc, futex, rwsem, rwsem-rspin,
lockref, percid), percid-ALLOCATOR (--variant percid --cid ALLOCATOR), or
MUTEX/RWLOCK (--mutex MUTEX --rwlock RWLOCK).

The metric is the command's wall time in seconds (--time, the default), or with
--metric REGEX the first number in the first group of the first match of REGEX
in the command's stdout+stderr (the whole match if the regex has no group).
Direction: --time is lower-is-better; --metric defaults to higher-is-better
(throughput) -- pass --lower-is-better for latencies.

A run that exits non-zero, times out or prints no metric is reported with its
exit status and the tail of its output, and compare exits 1 at the end.

examples:
  {PROG} compare --variants futex,rwsem --metric 'events per second: *([0-9.]+)' \\
      -- sysbench mutex --threads=16 run
  {PROG} compare --variants rwsem,rwsem-rspin --time --csv t.csv --png t.png -- ./app
  {PROG} compare --variants rwsem --set RWSEM_SPIN=0 --baseline glibc --profile-run -- ./bench
"""


def stats_module():
    """lockswap_stats.py, installed next to this file: the one implementation of the verdicts."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import lockswap_stats
    return lockswap_stats


def compare_parser(ls):
    p = argparse.ArgumentParser(
        prog=f"{PROG} compare", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=f"{PROG} compare [options] -- COMMAND [ARGS...]",
        description="Run a command as it is and under several lock variants, in interleaved "
                    "rounds with rotated order, and state per variant how many times faster or "
                    "slower it is, with a confidence interval, or that the runs cannot tell.",
        epilog=COMPARE_EPILOG)
    p.add_argument("--variants", default="glibc,futex,rwsem", metavar="V1,V2,...",
                   help="comma-separated variants (default: glibc,futex,rwsem; none is always a row)")
    p.add_argument("--baseline", default=REFERENCE, metavar="V",
                   help=f"the reference row of the ratios (default: {REFERENCE}, the command without lockswap)")
    p.add_argument("--repeat", type=int, metavar="N",
                   help=f"rounds (default {ls.runs_needed()}: the fewest that can reach 95%%)")
    p.add_argument("--level", type=float, default=ls.DEFAULT_LEVEL, metavar="P",
                   help="confidence level of the intervals (default 0.95)")
    m = p.add_mutually_exclusive_group()
    m.add_argument("--metric", metavar="REGEX", help="extract the metric from the output")
    m.add_argument("--time", action="store_true", help="measure wall time (the default)")
    d = p.add_mutually_exclusive_group()
    d.add_argument("--higher-is-better", dest="higher", action="store_true", default=None)
    d.add_argument("--lower-is-better", dest="higher", action="store_false")
    p.add_argument("--no-glibc", action="store_true", help="do not add the glibc row")
    p.add_argument("--probe", metavar="PATH",
                   help="the core-to-core probe (default: lockswap-probe next to the lockswap command)")
    p.add_argument("--keep-unsteady", action="store_true",
                   help="keep rounds whose before/after probes disagree (default: dropped)")
    p.add_argument("--stats", action="store_true",
                   help="counts-only statistics of every measured run (never the profiler), in --stats-dir")
    p.add_argument("--profile-run", action="store_true",
                   help="one extra profiled run per row, labelled profile, not in the table")
    p.add_argument("--stats-dir", metavar="DIR", help="where --stats and --profile-run write (default: a new "
                                                      "directory under $TMPDIR)")
    p.add_argument("--csv", metavar="FILE", help="write every run and the summary as CSV")
    p.add_argument("--png", metavar="FILE", help="plot every run and the medians per variant")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a LOCKSWAP_* setting for every run (repeatable), as `lockswap --set`")
    p.add_argument("--lib", metavar="PATH", help="liblockswap.so to use (passed to the wrapper)")
    p.add_argument("--timeout", type=float, metavar="S", help="kill a run after S seconds (a failure)")
    p.add_argument("--tail", type=int, default=15, metavar="LINES",
                   help="output lines shown for a failed run (default 15)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    return p


def variant_options(v):
    if "/" in v:
        mutex, rwlock = v.split("/", 1)
        return ["--mutex", mutex, "--rwlock", rwlock]
    if v.startswith("percid-"):
        return ["--variant", "percid", "--cid", v[len("percid-"):]]
    return ["--variant", v]


def number_in(text):
    m = re.search(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", text.replace(",", ""))
    return float(m.group(0)) if m else None


def extract_metric(regex, output):
    m = regex.search(output)
    if not m:
        return None
    return number_in(m.group(1) if regex.groups else m.group(0))


class Run:
    def __init__(self, index, round_no, position, variant):
        self.index, self.round, self.position, self.variant = index, round_no, position, variant
        self.rc = None
        self.value = None
        self.wall_s = None
        self.error = None
        self.output = ""

    @property
    def ok(self):
        return self.error is None


class Round:
    def __init__(self, number):
        self.number = number
        self.probe_before = self.probe_after = None
        self.kept = True
        self.steady = True
        self.runs = []

    def values(self):
        return {r.variant: r.value for r in self.runs if r.ok}


def execute(run, argv, env, args, regex):
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        run.error, run.rc = f"cannot start: {e.strerror}", 127
        return
    try:
        out, _ = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        run.error = f"timed out after {args.timeout:g}s"
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    run.wall_s = time.monotonic() - start
    run.rc = proc.returncode
    run.output = out.decode("utf-8", errors="replace")
    if run.error:
        return
    if run.rc != 0:
        run.error = f"exit status {run.rc}" if run.rc > 0 else f"killed by signal {-run.rc}"
        return
    run.value = run.wall_s if regex is None else extract_metric(regex, run.output)
    if run.value is None:
        run.error = f"metric /{regex.pattern}/ not found in the output"


def clean_environ(keep=()):
    """The caller's environment without LD_PRELOAD and LOCKSWAP_* but KEEP: what `none` runs
    in, and (keeping the wrapper's own LOCKSWAP_LIB) what the wrapper starts from."""
    return {k: v for k, v in os.environ.items()
            if k != "LD_PRELOAD" and (not k.startswith("LOCKSWAP_") or k in keep)}


def file_label(v):
    return re.sub(r"[^A-Za-z0-9_.+-]", "+", v)


class Environments:
    """Each row's environment, computed once by the lockswap command (which also checks the
    settings: a bad one stops compare here, before any run)."""

    def __init__(self, wrapper, args, stats_dir):
        self.wrapper, self.args, self.stats_dir = wrapper, args, stats_dir
        self.common = (["--lib", args.lib] if args.lib else [], [x for s in args.set for x in ("--set", s)])

    def measured(self, v):
        if v == REFERENCE:
            return clean_environ()
        if not self.args.stats:
            return self.capture(v, [])
        return self.capture(v, ["--stats"], os.path.join(self.stats_dir, f"{file_label(v)}.%p"))

    def profiled(self, v):
        return self.capture(v, ["--profile"], os.path.join(self.stats_dir, f"{file_label(v)}.profile.%p"))

    def capture(self, v, extra, stats_file=None):
        """`lockswap <options> -- env -0` -> the environment COMMAND would get. With statistics,
        the env process's own dump goes to a scratch file, and the row's file is put in after."""
        scratch = tempfile.mkdtemp(prefix="lockswap-env-") if stats_file else None
        opts = extra + (["--stats-file", os.path.join(scratch, "env.%p")] if scratch else [])
        argv = [self.wrapper, *self.common[0], *variant_options(v), *self.common[1], *opts, "--", "env", "-0"]
        try:
            p = subprocess.run(argv, capture_output=True, env=clean_environ(keep=("LOCKSWAP_LIB",)))
        finally:
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
        if p.returncode != 0:
            sys.stderr.write(p.stderr.decode("utf-8", errors="replace"))
            raise SystemExit(2)
        env = dict(item.split("=", 1) for item in os.fsdecode(p.stdout).split("\0") if "=" in item)
        if stats_file:
            env["LOCKSWAP_STATS_FILE"] = stats_file
        return env


def probe_path(args, wrapper):
    if args.probe is not None:
        return args.probe
    return os.path.join(os.path.dirname(os.path.realpath(wrapper)), "lockswap-probe")


def loadavg_text():
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def plan_variants(args, parser):
    listed = [v for v in (x.strip() for x in args.variants.split(",")) if v]
    if len(set(listed)) != len(listed):
        parser.error(f"--variants lists a variant twice: {args.variants}")
    rows = [REFERENCE] + ([] if args.no_glibc or "glibc" in listed else ["glibc"])
    rows += [v for v in listed if v != REFERENCE]
    if args.no_glibc and "glibc" in rows:
        rows.remove("glibc")
    if args.baseline not in rows:
        parser.error(f"--baseline {args.baseline} is not one of the rows: {', '.join(rows)}")
    return rows


def summarize(ls, rounds, variants, baseline, higher, level):
    kept = [rd.values() for rd in rounds if rd.kept]
    rows = []
    for v in variants:
        vals = sorted(values[v] for values in kept if v in values)
        runs = [r for rd in rounds for r in rd.runs if r.variant == v]
        row = {"variant": v, "n": len(vals), "failed": sum(1 for r in runs if not r.ok)}
        if vals:
            row.update(median=statistics.median(vals), min=vals[0], max=vals[-1])
        if v == baseline:
            row["verdict"] = "reference"
        else:
            row["result"] = ls.Verdict(ls.paired_ratios(kept, v, baseline), higher, level)
            row["verdict"] = row["result"].word
        rows.append(row)
    return rows


def fmt_val(x):
    if x is None:
        return "-"
    return f"{x:.4g}" if abs(x) < 1e5 else f"{x:.0f}"


def fmt_ratio(x):
    return "-" if x is None else f"{x:.3f}"


def compare_table(rows, baseline, level):
    head = ["variant", "runs", "median", "min", "max", f"x-vs-{baseline}", f"{level:.0%}.low", f"{level:.0%}.high",
            "failed", "verdict"]
    table_rows = [head]
    for r in rows:
        res = r.get("result")
        speed = (1.0, None, None) if r["variant"] == baseline else (
            (res.speed, res.lo, res.hi) if res else (None, None, None))
        table_rows.append([r["variant"], r["n"], fmt_val(r.get("median")), fmt_val(r.get("min")),
                           fmt_val(r.get("max")), *[fmt_ratio(x) for x in speed], r["failed"] or "",
                           r["verdict"]])
    return table(table_rows, right_from=1)


def compare_header(info, args, baseline, level, ls):
    out = [f"{PROG} compare: {shlex.join(info['cmd'])}",
           info["env_line"] or f"env: probe unavailable ({info['probe'] or 'no probe'})",
           f"load average (1/5/15 min): before {info['load_before']}, after {info['load_after']}"]
    total, kept = len(info["rounds"]), sum(1 for rd in info["rounds"] if rd.kept)
    unsteady = sum(1 for rd in info["rounds"] if not rd.steady)
    if not info["probe_ok"]:
        why = ("the probe gave no reading: one CPU?" if os.access(info["probe"] or "", os.X_OK)
               else "probe unavailable")
        out.append(f"rounds: {kept} of {total} kept ({why}: every round counted as steady)")
    elif args.keep_unsteady:
        out.append(f"rounds: {kept} of {total} kept ({unsteady} unsteady kept by --keep-unsteady)")
    else:
        out.append(f"rounds: {kept} of {total} kept" + (
            f" ({unsteady} dropped: the core-to-core probe changed by more than {ls.PROBE_TOLERANCE:g}x "
            "across it; --keep-unsteady keeps them)" if unsteady else " (all steady)"))
    ref = f"{baseline} (the command without lockswap)" if baseline == REFERENCE else f"{baseline} (--baseline)"
    out.append(f"metric: {info['metric_name']}, {'higher' if info['higher'] else 'lower'} is better; "
               f"reference: {ref}")
    out.append(f"x-vs-{baseline} = how many times faster than {baseline} (>1 faster): the median of the per-round "
               f"ratios, with its {level:.0%} sign-test interval [low, high]")
    return out


def write_csv(path, rounds, rows, profile_runs, info, baseline):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["record", "variant", "round", "position", "status", "exit_status", "value", "wall_s",
                    "probe_before_ns", "probe_after_ns", "kept", "n", "median", "min", "max", "ratio",
                    "ratio_low", "ratio_high", "verdict", "rounds_kept", "baseline", "metric", "direction",
                    "stats_file"])
        direction = "higher" if info["higher"] else "lower"
        tail = [baseline, info["metric_name"], direction]
        opt = lambda x: "" if x is None else repr(x)
        for rd in rounds:
            for r in rd.runs:
                w.writerow(["run", r.variant, rd.number, r.position, "ok" if r.ok else r.error,
                            "" if r.rc is None else r.rc, opt(r.value),
                            "" if r.wall_s is None else f"{r.wall_s:.6f}", opt(rd.probe_before),
                            opt(rd.probe_after), int(rd.kept), *[""] * 9, *tail, ""])
        kept = sum(1 for rd in rounds if rd.kept)
        for s in rows:
            res = s.get("result")
            ratio = (1.0, None, None) if s["variant"] == baseline else (
                (res.speed, res.lo, res.hi) if res else (None, None, None))
            w.writerow(["summary", s["variant"], "", "", "", "", "", "", "", "", "", s["n"],
                        *[opt(s.get(k)) for k in ("median", "min", "max")], *[opt(x) for x in ratio],
                        s["verdict"], kept, *tail, ""])
        for r, dump in profile_runs:
            w.writerow(["profile", r.variant, "", "", "ok" if r.ok else r.error, "" if r.rc is None else r.rc,
                        opt(r.value), "" if r.wall_s is None else f"{r.wall_s:.6f}", *[""] * 11, *tail, dump])


def compare_png(path, rounds, rows, info, baseline):
    plt, why = import_pyplot()
    if plt is None:
        warn(f"compare: PNG {path} skipped: {why}")
        return
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(rows) + 2), 5))
    for x, s in enumerate(rows):
        pts = [r.value for rd in rounds if rd.kept for r in rd.runs if r.variant == s["variant"] and r.ok]
        n = max(len(pts), 1)
        ax.scatter([x + 0.25 * (i / n - 0.5) for i in range(len(pts))], pts, s=18, alpha=0.7, color="C0")
        if "median" in s:
            ax.hlines(s["median"], x - 0.3, x + 0.3, color="C3", linewidth=2)
            res = s.get("result")
            label = (f"{res.speed:.3f}x\n{res.word}" if res and res.speed is not None
                     else s["verdict"] if s["variant"] == baseline else "")
            ax.annotate(label, (x, s["median"]), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=7)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([s["variant"] for s in rows])
    ax.set_ylabel(info["metric_name"])
    ax.set_title(f"lockswap compare: {info['metric_name']}, {'higher' if info['higher'] else 'lower'} is better\n"
                 f"points = runs of kept rounds, bar = median, label = times faster than {baseline}", fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"{PROG}: compare: wrote {path}", file=sys.stderr)


def failure_report(run, tail, label=None):
    lines = run.output.rstrip("\n").splitlines()[-tail:]
    out = [f"FAILED [{run.index}] {run.variant} {label or f'round {run.round}'}: {run.error}"
           + (f" (exit status {run.rc})" if run.rc not in (None, 0) and "exit status" not in run.error else "")]
    out += [f"    | {line}" for line in lines] or ["    (no output)"]
    return out


def run_rounds(ls, variants, envs, cmd, args, regex, probe):
    """The measured rounds: every row once per round, order rotated, probes around each."""
    rounds, total, index = [], args.repeat * len(variants), 0
    try:
        for number in range(1, args.repeat + 1):
            rd = Round(number)
            rounds.append(rd)
            rd.probe_before = ls.probe_c2c(probe)
            k = (number - 1) % len(variants)
            for pos, v in enumerate(variants[k:] + variants[:k], 1):
                index += 1
                run = Run(index, number, pos, v)
                print(f"[{index}/{total}] {v} round {number} ...", end="", file=sys.stderr, flush=True)
                execute(run, cmd, envs[v], args, regex)
                status = fmt_val(run.value) if run.ok else f"FAILED: {run.error}"
                print(f" {status}  ({run.wall_s or 0:.2f}s)", file=sys.stderr, flush=True)
                rd.runs.append(run)
            rd.probe_after = ls.probe_c2c(probe)
            rd.steady = ls.steady_round(rd.probe_before, rd.probe_after)
            rd.kept = rd.steady or args.keep_unsteady
    except KeyboardInterrupt:
        print("\ninterrupted: summary of the completed runs", file=sys.stderr)
        return rounds, True
    return rounds, False


def profile_runs(variants, env_maker, cmd, args, regex):
    """One run per row under the profiler (none has no library to profile): never in the table."""
    done = []
    for i, v in enumerate(v for v in variants if v != REFERENCE):
        env = env_maker.profiled(v)
        run = Run(i + 1, 0, 0, v)
        print(f"[profile {i + 1}] {v} ...", end="", file=sys.stderr, flush=True)
        execute(run, cmd, env, args, regex)
        print(" done" if run.ok else f" FAILED: {run.error}", file=sys.stderr, flush=True)
        done.append((run, env["LOCKSWAP_STATS_FILE"]))
    return done


def profile_lines(done):
    out = ["", "profile runs (one per row, under the profiler: not timed, not in the table):"]
    for run, dump in done:
        status = "ok" if run.ok else f"FAILED: {run.error}"
        out.append(f"  profile {run.variant}: {status}; {PROG} report {dump.replace('%p', '*')}")
    return out


def cmd_compare(argv, wrapper):
    ls = stats_module()
    parser = compare_parser(ls)
    args = parser.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        parser.error("no command given (put it after --)")
    if not 0.5 <= args.level < 1:
        parser.error("--level must be in [0.5, 1)")
    args.repeat = ls.runs_needed(args.level) if args.repeat is None else args.repeat
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if not wrapper:
        parser.error("internal: run through the lockswap command (no --wrapper)")
    regex = None
    if args.metric:
        try:
            regex = re.compile(args.metric, re.M)
        except re.error as e:
            parser.error(f"--metric: bad regular expression: {e}")
    higher = args.higher if args.higher is not None else regex is not None
    variants = plan_variants(args, parser)
    stats_dir = None
    if args.stats or args.profile_run:
        stats_dir = args.stats_dir or tempfile.mkdtemp(prefix="lockswap-compare-")
        os.makedirs(stats_dir, exist_ok=True)
    env_maker = Environments(wrapper, args, stats_dir)
    envs = {v: env_maker.measured(v) for v in variants}
    if args.profile_run and len(variants) > 1:
        env_maker.profiled(variants[-1])   # the wrapper knows --profile: checked before any run

    probe = probe_path(args, wrapper)
    info = {"cmd": cmd, "probe": probe, "env_line": ls.probe_summary(probe), "higher": higher,
            "metric_name": f"/{args.metric}/" if regex else "wall time (s)", "load_before": loadavg_text()}
    info["probe_ok"] = ls.probe_c2c(probe) is not None
    print(f"{PROG} compare: {len(variants)} rows x {args.repeat} rounds = {len(variants) * args.repeat} runs of: "
          f"{shlex.join(cmd)}" + ("" if info["probe_ok"] else " (probe unavailable)"), file=sys.stderr)
    rounds, interrupted = run_rounds(ls, variants, envs, cmd, args, regex, probe if info["probe_ok"] else None)
    profiled = [] if interrupted or not args.profile_run else profile_runs(variants, env_maker, cmd, args, regex)
    info.update(load_after=loadavg_text(), rounds=rounds)

    rows = summarize(ls, rounds, variants, args.baseline, higher, args.level)
    out = compare_header(info, args, args.baseline, args.level, ls) + compare_table(rows, args.baseline, args.level)
    out += [""] + [r["result"].sentence(r["variant"], args.baseline) for r in rows if "result" in r]
    if args.stats:
        out.append(f"counts-only statistics of the measured runs: {stats_dir}/ ({PROG} report {stats_dir}/<row>.*)")
    if profiled:
        out += profile_lines(profiled)
    print("\n".join(out))
    if args.csv:
        write_csv(args.csv, rounds, rows, profiled, info, args.baseline)
        print(f"{PROG}: compare: wrote {args.csv}", file=sys.stderr)
    if args.png:
        compare_png(args.png, rounds, rows, info, args.baseline)
    failed = [r for rd in rounds for r in rd.runs if not r.ok] + [r for r, _ in profiled if not r.ok]
    if failed:
        total = sum(len(rd.runs) for rd in rounds) + len(profiled)
        print(f"\n{len(failed)} of {total} runs failed:")
        for f in failed:
            print("\n".join(failure_report(f, args.tail, "profile run" if f.round == 0 else None)))
    return 1 if failed or interrupted else 0

# --------------------------------------------------------------------------

def main(argv):
    wrapper = None
    if argv[:1] == ["--wrapper"] and len(argv) >= 2:
        wrapper, argv = argv[1], argv[2:]
    if not argv or argv[0] not in ("report", "compare"):
        print(f"usage: {PROG} report|compare ... (see {PROG} report --help, {PROG} compare --help)",
              file=sys.stderr)
        return 2
    try:
        if argv[0] == "report":
            return cmd_report(argv[1:])
        return cmd_compare(argv[1:], wrapper)
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as e:   # a bug here: one line, never a traceback over the user's data
        warn(f"{argv[0]}: internal error: {type(e).__name__}: {e} (please report it)")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
