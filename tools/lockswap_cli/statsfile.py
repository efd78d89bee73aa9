"""The statistics file (format version 1, lockswap-v1 records): parsing untrusted dumps."""

import os
import re
from .common import warn


RECORD_PREFIX = "lockswap-v1 "
HIST_BUCKETS = 48             # log2 buckets of nanoseconds, i = 0..47
FAMILIES = ("mutex", "rwlock", "cond", "sem")
VARIANT_KEYS = ("mutex", "rwlock", "sem", "cid")
# Families a dump names only when the library knows them (older dumps: absent, taken as off).
OPTIONAL_VARIANT_KEYS = ("wtlock", "lwlock")
COUNTERS = ("acq", "contended", "rd_acq", "rd_contended")
# What a dump holds depends on the mode that wrote it (begin's stats=): a counts dump has
# the lock events only. These figures come from the profiler: its per-lock and per-site
# tables, the acquisitions summed from them and `dropped` (acquisitions the tables had no
# room for). Absent is not zero: a report says these were not collected.
PROFILE_FIGURES = ("acq", "contended", "dropped", "locks", "sites")
# Per PostgreSQL LWLock tranche (preload/lwlock/), in every mode.
LWLOCK_COUNTERS = ("acq", "missed", "waits", "wait_ns", "hold_samples", "hold_ns")
# Per WiredTiger rwlock (preload/wtlock/), counts mode: wtlock records.
WTLOCK_COUNTERS = ("acq", "rd_acq", "contended", "rd_contended", "wait_ns", "wait_max_ns", "hold_samples", "hold_ns")

# Input is untrusted: any file may be truncated, corrupted or hostile. Every
# number must be a u64 (anything else: the record is skipped with a warning
# naming file:line), text fields are shown escaped, a path is a byte string.

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
    """A path as the writer percent-encoded it (%XX for bytes <= 0x20, '%' and >= 0x7f; older
    dumps left bytes >= 0x80 as they were, or wrote only %20) -> the file name, decoded as the OS decodes names (bytes that are not
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


def event_counts(text):
    """A selected record's events= field: name:count;... ("-": none) -> {name: count}."""
    counts = {}
    for item in ([] if text == "-" else text.split(";")):
        name, _, n = item.partition(":")
        value = parse_number(n)
        if not name or value is None:
            raise BadRecord(f"events item {item[:40]!r} is not name:count")
        counts[name] = counts.get(name, 0) + value
    return counts


def wait_record(f):
    """A wait record (the library's: ip and bt; eBPF's: src=ebpf and site=SYMBOL+0xOFF)."""
    if "ip" not in f and "site" not in f:
        raise BadRecord("wait record without ip or site")
    return {"kind": f["kind"], "call": f.get("call"), "ip": need_u64(f, "ip") if "ip" in f else None,
            "n": need_u64(f, "n"), "ns": need_u64(f, "ns"), "max_ns": need_u64(f, "max_ns"),
            "bt": backtrace(f.get("bt", "")), "src": f.get("src", "lockswap"),
            "site": unescape_path(f["site"]) if "site" in f else None,
            # eBPF: the frames as MODULE+0xOFF[:FUNCTION], ';'-separated (lockswap attribute)
            "stack": [unescape_path(x) for x in f.get("stack", "").split(";", MAX_BACKTRACE)[:MAX_BACKTRACE]
                      if x and x != "-"],
            "pid": need_u64(f, "pid") if "pid" in f else None}


def probe_record(f):
    """A probe record of `lockswap attribute`: an application's own name for a wait."""
    return {"app": f["app"], "kind": f.get("kind", "?"), "name": unescape_path(f.get("name", "?")),
            "n": need_u64(f, "n"), "ns": need_u64(f, "ns"), "pid": need_u64(f, "pid") if "pid" in f else None}


class Dump:
    """One complete (or truncated) statistics snapshot of one process."""

    def __init__(self, fields, path, order):
        self.pid = parse_number(fields.get("pid", "")) or 0
        self.seq = parse_number(fields.get("seq", "")) or 0
        self.start_ns = parse_number(fields.get("start_ns", "")) or 0
        self.now_ns = parse_number(fields.get("now_ns", "")) or 0
        self.variants = {k: fields.get(k, "?") for k in VARIANT_KEYS}
        self.variants.update({k: fields[k] for k in OPTIONAL_VARIANT_KEYS if k in fields})
        # counts: event counters only, the per-lock profiler was off (older dumps: profile)
        self.stats = fields.get("stats", "profile")
        self.exe = unescape_path(fields.get("exe", "?"))
        # `lockswap attribute` (root, eBPF) writes its records in blocks of their own (src=ebpf):
        # kept beside the library's dump of the same process, never in its place
        self.ebpf = fields.get("src") == "ebpf" or self.stats == "ebpf"
        self.path = path
        self.order = order            # position among all dumps read: later wins ties
        self.complete = False
        self.calls = {}
        self.events = {}
        self.locks = {}               # lock id -> validated lock record
        self.sites = []
        self.maps = []                # (start, end, offset, path), sorted by start for locate()
        self.dropped = {"locks": 0, "sites": 0}
        self.rules = {}               # LOCKSWAP_SELECT rule index -> {text, unattributed}
        self.selected = []            # locks a rule chose, with their own lock events
        self.waits = []               # wait records: waits per call site by kind (reach.py)
        self.probes = []              # probe records: an application's own wait names (eBPF)
        self.lwlocks = []             # lwlock records: PostgreSQL LWLock tranches (LOCKSWAP_LWLOCK)
        self.wtlocks = []             # wtlock records: WiredTiger rwlocks, counts mode (LOCKSWAP_WTLOCK)
        self.dropped_waits = None     # dropped waits=: None from a library without wait records

    @property
    def key(self):
        return (self.pid, self.start_ns, "ebpf") if self.ebpf else (self.pid, self.start_ns)

    @property
    def profiled(self):
        """Written with the profiler on: stats=profile, or an older dump (no stats=, profiler
        always on), or any dump that carries per-lock records after all."""
        return self.stats != "counts" or bool(self.locks or self.sites)

    def not_collected(self):
        """The figures this dump does not hold. The calls per family come from the profiler's
        wrappers (one record per family, even 0): no record, no figure."""
        return ([] if self.calls else ["calls"]) + ([] if self.profiled else list(PROFILE_FIGURES))

    def add(self, rtype, f):
        """Add one record; BadRecord when its fields are malformed (nothing is added then)."""
        if rtype == "calls" and "family" in f:
            self.calls[f["family"]] = self.calls.get(f["family"], 0) + need_u64(f, "calls")
        elif rtype == "event" and "name" in f:
            self.events[f["name"]] = self.events.get(f["name"], 0) + need_u64(f, "count")
        elif rtype == "lock" and "id" in f:
            self.locks[f["id"]] = {"addr": need_u64(f, "addr"), "kind": f.get("kind", "?"),
                                   # LOCKSWAP_SELECT: the variant it ran, where it was initialised
                                   # (or, never initialised, first taken)
                                   "variant": f.get("variant"),
                                   "first_ip": need_u64(f, "first_ip") if "first_ip" in f else None,
                                   **stat_fields(f)}
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
            if "waits" in f:
                self.dropped_waits = (self.dropped_waits or 0) + need_u64(f, "waits")
        elif rtype == "wait" and "kind" in f:
            self.waits.append(wait_record(f))
        elif rtype == "probe" and "app" in f:
            self.probes.append(probe_record(f))
        elif rtype == "rule" and "index" in f:
            self.rules[need_u64(f, "index")] = {"text": unescape_path(f.get("text", "")),
                                                "unattributed": need_u64(f, "unattributed")}
        elif rtype == "selected" and "addr" in f:
            self.selected.append({"addr": need_u64(f, "addr"), "family": f.get("family", "?"),
                                  "variant": f.get("variant", "?"), "rule": need_u64(f, "rule"),
                                  "events": event_counts(f.get("events", "-"))})
        elif rtype == "lwlock" and "tranche" in f:
            self.lwlocks.append({"tranche": unescape_path(f["tranche"]), "variant": f.get("variant", "?"),
                                 **{k: need_u64(f, k) for k in LWLOCK_COUNTERS}})
        elif rtype == "wtlock" and "addr" in f:
            self.wtlocks.append({"addr": need_u64(f, "addr"), "variant": f.get("variant", "?"),
                                 "first_ip": need_u64(f, "first_ip") if "first_ip" in f else None,
                                 **{k: need_u64(f, k) for k in WTLOCK_COUNTERS}})
        # anything else: a newer writer's record, ignored by contract


class DumpReader:
    """Reads statistics files; a malformed record is skipped with a warning naming file:line,
    an unreadable file with a warning naming the file."""

    def __init__(self):
        self.dumps, self.order = [], 0
        self.loose = []     # wait and probe records outside any begin..end block (eBPF's)

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
        elif rtype == "wait" and "kind" in fields:
            self.loose.append((rtype, wait_record(fields), path))
        elif rtype == "probe" and "app" in fields:
            self.loose.append((rtype, probe_record(fields), path))
        elif rtype == "dropped" and fields.get("src") == "ebpf":
            # lockswap attribute's losses: events the kernel's buffers lost, and waits, processes
            # or probe events its maps had no room for
            self.loose.append((rtype, {k: need_u64(fields, k) for k in EBPF_DROPPED if k in fields}, path))
        return current


def read_dumps(paths):
    """All dumps in PATHS, in file order. Records outside begin..end are ignored."""
    return read_dumps_and_loose(paths)[0]


EBPF_DROPPED = ("lost", "waits", "pids", "probes")


def read_dumps_and_loose(paths):
    """All dumps in PATHS, and the wait and probe records found outside any begin..end block
    ([(rtype, record, path)]: `lockswap attribute` may write them so)."""
    reader = DumpReader()
    for path in paths:
        reader.read(path)
    for d in reader.dumps:
        d.maps.sort()
    return reader.dumps, reader.loose


def last_dump_per_process(dumps):
    """The newest snapshot of each (pid, start_ns): complete over truncated, then highest seq,
    then the one read last."""
    best = {}
    for d in dumps:
        rank = (d.complete, d.seq, d.order)
        if d.key not in best or rank > best[d.key][0]:
            best[d.key] = (rank, d)
    return sorted((d for _, d in best.values()), key=lambda d: (d.start_ns, d.pid))
