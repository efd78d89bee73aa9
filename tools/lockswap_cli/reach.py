"""Reach: how much of a program's lock waiting the compared lock variants can move at all
(docs/reach.md). A verdict "variant X does not change the throughput" says nothing about the
locks X does not swap: this module sorts the waiting a dump saw into classes, swapped or not.

Input: the dumps of one process, of a process tree or of a run's files (statsfile.Dump), the
library's counts-mode records (wait_* / spin_* lock events, `wait` records per call site,
`map`, `dropped waits=`) and, from `lockswap attribute` (root, eBPF), `wait` records with
src=ebpf and `probe` records (in a begin..end block of their own or outside any block).
Standard library only; the symbols come from symbolize.Symbolizer (addr2line, bounded)."""

import os
import re
from .common import fmt_ns, warn
from .statsfile import last_dump_per_process, read_dumps_and_loose
from .symbolize import Symbolizer, locate

# Lock events the library counts in lockswap's own slow paths (ns slept or spun, and sleeps).
ALGORITHM_EVENTS = ("wait_mutex_ns", "wait_rwlock_ns", "spin_mutex_ns", "spin_rwlock_ns")
ALGORITHM_COUNTS = ("wait_mutex_n", "wait_rwlock_n")
SEM_EVENTS, SEM_COUNTS = ("wait_sem_ns",), ("wait_sem_n",)
COND_EVENTS, COND_COUNTS = ("wait_cond_ns",), ("wait_cond_n",)
INTERNAL_EVENTS, INTERNAL_COUNTS = ("wait_internal_ns",), ("wait_internal_n",)
REACH_EVENTS = ALGORITHM_EVENTS + ALGORITHM_COUNTS + SEM_EVENTS + SEM_COUNTS + COND_EVENTS + \
    COND_COUNTS + INTERNAL_EVENTS + INTERNAL_COUNTS

# Kinds of `wait` records: the library's (any src) and those only eBPF sees.
LIBRARY_KINDS = ("futex", "cond", "idle", "delay")
EBPF_KINDS = ("glibc_internal", "glibc_lock", "lockswap")

# The classes of lock waiting, in the order shown: (key, label, swapped by a variant).
LOCK_CLASSES = (
    ("algorithm", "algorithm swapped", True),
    ("sleep_primitive", "sleep primitive swapped", True),
    ("lockswap_ebpf", "lockswap (eBPF, family not told)", True),
    ("lockswap_internal", "lockswap's own locks", False),
    ("own_futex", "own futex locks", False),
    ("spin_delay", "spin-delay sleeps", False),
    ("glibc_internal", "glibc internal", False),
    ("glibc_lock", "glibc's locks", False),
)
CLASS_NOTES = {
    "algorithm": "lockswap mutex + rwlock waits and spins (a native variant's algorithm; "
                 "WiredTiger's rwlocks under LOCKSWAP_WTLOCK=rwsem|rwsem-rspin and PostgreSQL's "
                 "LWLocks under LOCKSWAP_LWLOCK count here)",
    "sleep_primitive": "lockswap semaphore waits: the program's own lock queues, sleeping on a semaphore",
    "lockswap_ebpf": "sleeps inside liblockswap seen by eBPF (the library counted none itself)",
    "lockswap_internal": "lockswap's own sleeps of no lock family (an id allocator's lock): its cost, not the program's locks",
    "own_futex": "futex waits the program issued itself through syscall()",
    "spin_delay": "timed sleeps recognised as a lock's backoff",
    "glibc_internal": "glibc's own lll locks: malloc arenas, stdio, loader",
    "glibc_lock": "pthread locks and semaphores glibc runs itself (no preload, the glibc column, or objects handed to glibc)",
}
EBPF_ONLY = ("glibc_internal", "glibc_lock")
GLIBC_COLUMN_NOTE = "glibc column: nothing swapped; these waits are glibc's, invisible unprivileged"
NOT_SEEN = "not seen without `lockswap attribute` (root, eBPF)"
APART_CLASSES = (("cond", "condition waits"), ("idle", "idle waits"), ("sleep", "other timed sleeps"))

# A timed sleep is a lock's backoff when the site or a frame of its backtrace is one of these
# functions (the name as addr2line gives it, arguments and namespaces stripped). pg_usleep is
# not here: it is a spin delay only under s_lock / perform_spin_delay, which the frames show.
SPIN_DELAY_FUNCTIONS = {
    "s_lock": "PostgreSQL spinlock (s_lock.c: s_lock -> perform_spin_delay -> pg_usleep)",
    "perform_spin_delay": "PostgreSQL spinlock backoff (perform_spin_delay -> pg_usleep)",
    "SpinLockDelay": "tcmalloc/abseil spinlock backoff (SpinLockDelay)",
    "AbslInternalSpinLockDelay": "abseil spinlock backoff",
    "__wt_spin_backoff": "WiredTiger spin backoff (__wt_spin_backoff -> __wt_sleep)",
}
# A condition wait whose frames name one of these is a lock's sleep (its lock sleeps on a
# condition variable): still shown apart, named as such.
COND_LOCK_FUNCTIONS = {
    "__wt_readlock": "WiredTiger rwlock (read side sleeps on a condvar)",
    "__wt_writelock": "WiredTiger rwlock (write side sleeps on a condvar)",
    "__wt_spin_lock": "WiredTiger spinlock",
}
FRAMES_LOOKED_AT = 4          # the library writes up to 4 return addresses per wait site
MAX_DELAY_SITES = 64          # delay sites symbolised to recognise spin delays (largest first)
TOP_SITES = 5
LOW_REACH_PCT = 50.0
WARNING = "this comparison can move at most {x} of the waiting ({y} by algorithm)"


def pct(part, whole):
    return 100.0 * part / whole if whole else None


def pct_text(p):
    if p is None:
        return "-"
    return f"{p:.1f}%" if 0 < p < 10 else f"{p:.0f}%"


def bare_name(function):
    """'ns::f<T>(int)' -> 'f': what the tables above match."""
    if not function:
        return ""
    name = function.split("(")[0].strip()
    depth, out = 0, []
    for c in name:                     # drop template arguments, which may hold '::'
        depth += c == "<"
        if depth == 0:
            out.append(c)
        depth -= c == ">" and depth > 0
    return "".join(out).rsplit("::", 1)[-1].strip()


def has_wait_data(d):
    """Whether the library that wrote dump D counts waits (any wait event or record, a probe, or
    `dropped waits=`): a dump without any is from a library before wait accounting."""
    return (d.dropped_waits is not None or bool(d.waits) or bool(d.probes)
            or any(name in d.events for name in REACH_EVENTS))


def glibc_column(d):
    """The dump's header says glibc for every family, WiredTiger's rwlocks are not swapped
    (LOCKSWAP_WTLOCK off or wt: WiredTiger's own algorithm) and no LOCKSWAP_SELECT rule chose a
    lock. A swapped WiredTiger rwlock waits as an rwlock (wait_rwlock_ns): algorithm swapped.
    A PostgreSQL whose LWLocks lockswap runs (the header says lwlock=, any variant, `pg` too:
    the algorithm is lockswap's port) waits in them as rwlocks: algorithm swapped."""
    return (all(d.variants.get(k) == "glibc" for k in ("mutex", "rwlock", "sem"))
            and d.variants.get("wtlock", "off") in ("off", "wt") and not d.variants.get("lwlock")
            and not (d.selected or d.rules))


class Site:
    def __init__(self, kind, src, module, offset, ip, name):
        self.kind, self.src, self.module, self.offset, self.ip, self.name = kind, src, module, offset, ip, name
        self.n = self.ns = self.max_ns = 0
        self.calls, self.bt, self.pids = set(), [], set()
        self.stack = []                     # eBPF: frame names, innermost first

    def add(self, rec, pid):
        self.n += rec["n"]
        self.ns += rec["ns"]
        self.max_ns = max(self.max_ns, rec["max_ns"])
        if rec.get("call"):
            self.calls.add(rec["call"])
        self.pids.add(pid)


class Model:
    """The classes of one run's waiting, summed over its processes."""

    def __init__(self):
        self.ns = {k: 0 for k, _, _ in LOCK_CLASSES}
        self.n = {k: 0 for k, _, _ in LOCK_CLASSES}
        self.apart = {k: 0 for k, _ in APART_CLASSES}
        self.apart_n = {k: 0 for k, _ in APART_CLASSES}
        self.sites = {}                     # (kind, src, module, offset|site) -> Site
        self.probes = {}                    # (app, kind, name) -> [n, ns]
        self.ebpf = False
        self.processes = 0
        self.glibc = 0
        self.dropped_waits = 0
        self.ebpf_dropped = {}      # lockswap attribute's dropped record: lost, waits, pids, probes
        self.ignored_ebpf = set()           # kinds counted by the library, ebpf's copy ignored

    def site(self, rec, d, kind):
        if rec["site"] is not None:
            key = (kind, "ebpf", None, rec["site"])
            make = lambda: Site(kind, "ebpf", None, None, rec["ip"], rec["site"])
        else:
            ip = rec["ip"] or 0
            module, offset = locate(d.maps, ip)
            key = (kind, "lockswap", module or d.exe, offset if module else ("unmapped", ip))
            if kind == "delay":    # one sleep, many callers (pg_usleep): told apart by the frames
                key += tuple(locate(d.maps, x) for x in rec["bt"][:FRAMES_LOOKED_AT])
            make = lambda: Site(kind, "lockswap", module, offset, ip, None)
        if key not in self.sites:
            self.sites[key] = make()
        s = self.sites[key]
        if not s.stack and rec.get("stack"):
            s.stack = rec["stack"][:FRAMES_LOOKED_AT + 4]
        if not s.bt and rec["bt"]:
            s.bt = [(ip_, *locate(d.maps, ip_)) for ip_ in rec["bt"][:FRAMES_LOOKED_AT]]
        return s


def add_process(m, d, ebpf_parts):
    """Dump D of one process and the eBPF records for it (EBPF_PARTS: [(rtype, fields-dict)])."""
    m.processes += 1
    glibc = glibc_column(d)
    m.glibc += glibc
    ev = d.events
    total = lambda names: sum(ev.get(n, 0) for n in names)
    m.ns["algorithm"] += total(ALGORITHM_EVENTS)
    m.n["algorithm"] += total(ALGORITHM_COUNTS)
    m.ns["sleep_primitive"] += total(SEM_EVENTS)
    m.n["sleep_primitive"] += total(SEM_COUNTS)
    m.ns["lockswap_internal"] += total(INTERNAL_EVENTS)
    m.n["lockswap_internal"] += total(INTERNAL_COUNTS)
    m.dropped_waits += d.dropped_waits or 0
    library_counted_lockswap = any(ev.get(n) for n in REACH_EVENTS)
    is_ebpf = lambda r: r["site"] is not None or r["src"] == "ebpf"
    own = [(r, d) for r in d.waits if not is_ebpf(r)]
    ebpf = [(r, d) for r in d.waits if is_ebpf(r)] + [(r, d) for rtype, r in ebpf_parts if rtype == "wait"]
    lib_kinds = {r["kind"] for r, _ in own}
    cond_records = 0
    for rec, dd in own + ebpf:
        kind, from_ebpf = rec["kind"], (rec["src"] == "ebpf" or rec["site"] is not None)
        m.ebpf = m.ebpf or from_ebpf
        if from_ebpf and kind in lib_kinds:
            m.ignored_ebpf.add(kind)        # the library's records of this kind count, not both
            continue
        if kind == "futex":
            m.ns["own_futex"] += rec["ns"]
            m.n["own_futex"] += rec["n"]
        elif kind == "cond":
            cond_records += rec["ns"]
            m.apart_n["cond"] += rec["n"]
        elif kind == "idle":
            m.apart["idle"] += rec["ns"]
            m.apart_n["idle"] += rec["n"]
        elif kind == "delay":
            pass                            # classified once the sites are symbolised
        elif kind in ("glibc_internal", "glibc_lock"):
            m.ns[kind] += rec["ns"]
            m.n[kind] += rec["n"]
            continue
        elif kind == "lockswap":
            if library_counted_lockswap:    # the same sleeps the library's own events count
                m.ignored_ebpf.add(kind)
            else:
                m.ns["lockswap_ebpf"] += rec["ns"]
                m.n["lockswap_ebpf"] += rec["n"]
            continue
        else:
            continue                        # a newer writer's kind: ignored by contract
        m.site(rec, dd, kind).add(rec, d.pid)
    # condition waits: the library's total (wait_cond_ns) or the sites', whichever saw more
    m.apart["cond"] += max(cond_records, total(COND_EVENTS))
    for rec in d.probes + [r for rtype, r in ebpf_parts if rtype == "probe"]:
        m.ebpf = True
        p = m.probes.setdefault((rec["app"], rec["kind"], rec["name"]), [0, 0])
        p[0] += rec["n"]
        p[1] += rec["ns"]


def recognise(frames, table):
    """The first frame (function names, inlined ones too) the TABLE names -> (name, what)."""
    for fr in frames:
        names = [fr.get("function")] + [i.get("function") for i in fr.get("inlined", [])]
        for name in names:
            bare = bare_name(name)
            if bare in table:
                return bare, table[bare]
    return None, None


def frame(symbolizer, module, offset):
    """The symbolizer's frame, or a bare one for an address it was not asked about."""
    try:
        return symbolizer.get(module, offset)
    except KeyError:
        return {"module": module, "offset": offset, "function": None, "source": None, "inlined": []}


EBPF_FRAME = re.compile(r"^[^:]*?\+0x[0-9A-Fa-f]+:~?(.+)$")   # MODULE+0xOFF:FUNCTION (~: nearest symbol)
EBPF_SYMBOL = re.compile(r"^~?([^+:]+)\+0x[0-9A-Fa-f]+$")      # SYMBOL+0xOFF


def ebpf_function(name):
    """The function an eBPF frame names: 'postgres+0x1a0:s_lock' or 's_lock+0x40' -> 's_lock'
    (a module's name when the frame has no symbol: matches nothing in the tables)."""
    m = EBPF_FRAME.match(name) or EBPF_SYMBOL.match(name)
    return m.group(1) if m else name


def site_frames(s, symbolizer):
    """The site itself, then its backtrace, as frames (eBPF: the names of its site and stack)."""
    if s.src == "ebpf":
        return [{"function": ebpf_function(x), "inlined": []} for x in [s.name] + s.stack]
    frames = [frame(symbolizer, s.module, s.offset)] if s.module else []
    frames += [frame(symbolizer, mod, off) for _, mod, off in s.bt if mod]
    return frames


def site_label(s, symbolizer):
    if s.src == "ebpf":
        return s.name
    if s.module is None:
        return f"{s.ip:#x}"
    fr = frame(symbolizer, s.module, s.offset)
    where = f"{os.path.basename(s.module)}+{s.offset:#x}"
    if fr["function"]:
        return f"{fr['function']}" + ("" if fr["source"] else f" [{where}]")
    return where


def site_entry(s, symbolizer, total, **extra):
    return {"site": site_label(s, symbolizer), "kind": s.kind, "src": s.src, "module": s.module,
            "offset": s.offset, "calls": sorted(s.calls), "n": s.n, "ns": s.ns, "max_ns": s.max_ns,
            "share": pct(s.ns, total), "pids": sorted(s.pids), **extra}


def compute(dumps, loose=(), symbol_budget=30.0, symbolizer=None, labels=True):
    """The reach of the processes DUMPS (the last dump of each, statsfile.last_dump_per_process;
    dumps with src=ebpf are the eBPF attribution's, merged into the process of the same pid)
    and LOOSE eBPF records [(rtype, fields, path)], or None when none of them counts waits.
    SYMBOLIZER may be shared by several calls (what it resolved is not asked again); LABELS
    False: only the frames that decide a class are symbolised (a table's column needs no names)."""
    library = [d for d in dumps if not d.ebpf]
    attached = {}
    for d in dumps:
        if d.ebpf:
            attached.setdefault(d.pid, []).extend([("wait", r) for r in d.waits] +
                                                  [("probe", r) for r in d.probes])
    ebpf_dropped = {}
    for rtype, rec, _ in loose:
        if rtype == "dropped":
            for k, n in rec.items():
                ebpf_dropped[k] = ebpf_dropped.get(k, 0) + n
            continue
        attached.setdefault(rec.get("pid"), []).append((rtype, rec))
    if not any(has_wait_data(d) for d in library) and not attached:
        return None
    m = Model()
    seen = set()
    for d in library:
        parts = attached.get(d.pid, []) if d.pid not in seen else []
        seen.add(d.pid)
        add_process(m, d, parts)
    orphans = [p for pid, parts in attached.items() if pid not in seen for p in parts]
    if orphans:                                  # eBPF records of processes no dump is from
        from .statsfile import Dump
        ghost = Dump({"mutex": "?", "rwlock": "?", "sem": "?"}, "(ebpf)", -1)
        add_process(m, ghost, orphans)
        m.processes -= 1
    m.ebpf_dropped = {k: n for k, n in ebpf_dropped.items() if n}
    return finish(m, symbolizer or Symbolizer(symbol_budget), labels)


def safe_compute(*args, **kw):
    """compute(), or None with one warning: the reach must never cost the report or the table."""
    try:
        return compute(*args, **kw)
    except Exception as e:   # a bug here: the rest of the output still comes
        warn(f"reach: internal error: {type(e).__name__}: {e} (please report it); no reach shown")
        return None


def of_files(files, symbolizer):
    """The reach of statistics FILES as a comparison's row sums it (the last dump of each process,
    its eBPF records beside it; no labels), or None without wait data."""
    if not files:
        return None
    dumps, loose = read_dumps_and_loose(files)
    return safe_compute(last_dump_per_process(dumps), loose, symbolizer=symbolizer, labels=False)


def finish(m, symbolizer, labels=True):
    delays = sorted((s for s in m.sites.values() if s.kind == "delay"), key=lambda s: -s.ns)
    futex = sorted((s for s in m.sites.values() if s.kind == "futex"), key=lambda s: -s.ns)
    cond = sorted((s for s in m.sites.values() if s.kind == "cond"), key=lambda s: -s.ns)
    idle = sorted((s for s in m.sites.values() if s.kind == "idle"), key=lambda s: -s.ns)
    wanted = delays[:MAX_DELAY_SITES] + (futex[:TOP_SITES] + cond[:TOP_SITES] + idle[:3] if labels else [])
    for s in wanted:
        if s.src != "ebpf":
            for mod, off in [(s.module, s.offset)] + [(mod, off) for _, mod, off in
                                                      (s.bt if s.kind in ("delay", "cond") else [])]:
                if (mod, off) not in symbolizer.done:
                    symbolizer.want(mod, off)
    symbolizer.resolve()
    spin, other = [], []
    for i, s in enumerate(delays):
        name, what = recognise(site_frames(s, symbolizer), SPIN_DELAY_FUNCTIONS) if i < MAX_DELAY_SITES \
            else (None, None)
        (spin if name else other).append((s, name, what))
    m.ns["spin_delay"] = sum(s.ns for s, _, _ in spin)
    m.n["spin_delay"] = sum(s.n for s, _, _ in spin)
    m.apart["sleep"] = sum(s.ns for s, _, _ in other)
    m.apart_n["sleep"] = sum(s.n for s, _, _ in other)

    total = sum(m.ns.values())
    classes = []
    glibc = m.processes > 0 and m.glibc == m.processes
    for key, label, swapped in LOCK_CLASSES:
        seen = m.ebpf or key not in EBPF_ONLY
        if key == "lockswap_ebpf" and not m.ns[key]:
            continue                         # only eBPF without the library's own events has it
        if glibc and swapped and not m.ns[key]:
            classes.append({"class": key, "label": label, "swapped": swapped, "seen": False, "ns": None,
                            "n": None, "share": None, "note": GLIBC_COLUMN_NOTE})
            continue
        classes.append({"class": key, "label": label, "swapped": swapped, "seen": seen,
                        "ns": m.ns[key] if seen else None, "n": m.n[key] if seen else None,
                        "share": pct(m.ns[key], total) if seen else None,
                        "note": CLASS_NOTES[key] if seen else NOT_SEEN})
    swapped_ns = sum(m.ns[k] for k, _, sw in LOCK_CLASSES if sw)
    if glibc:
        reach, reach_alg, why = None, None, "n/a (glibc column)"
    elif not total:
        reach, reach_alg, why = None, None, "no lock waiting recorded"
    else:
        reach, reach_alg, why = pct(swapped_ns, total), pct(m.ns["algorithm"], total), None
    warning = None
    if reach is not None and reach < LOW_REACH_PCT:
        warning = WARNING.format(x=pct_text(reach), y=pct_text(reach_alg))
    cond_total = m.apart["cond"]
    return {
        "processes": m.processes, "column": "glibc" if glibc else "native", "ebpf": m.ebpf,
        "lock_wait_ns": total, "swapped_ns": swapped_ns, "classes": classes,
        "reach_pct": reach, "reach_algorithm_pct": reach_alg, "reach_why": why, "warning": warning,
        "glibc_lock_pct": pct(m.ns["glibc_lock"], total) if glibc and m.ebpf else None,
        "futex_sites": [site_entry(s, symbolizer, total) for s in futex[:TOP_SITES]],
        "futex_sites_total": len(futex),
        "spin_delay_sites": [site_entry(s, symbolizer, total, recognised=name, what=what)
                             for s, name, what in spin[:TOP_SITES]],
        "cond_sites": [site_entry(s, symbolizer, cond_total, lock_sleep=recognise(
            site_frames(s, symbolizer), COND_LOCK_FUNCTIONS)[1]) for s in cond[:TOP_SITES]],
        "cond_sites_total": len(cond),
        "probes": [{"app": app, "kind": kind, "name": name, "n": n, "ns": ns}
                   for (app, kind, name), (n, ns) in sorted(m.probes.items(), key=lambda kv: -kv[1][1])[:TOP_SITES]],
        "probes_total": len(m.probes),
        "apart": {k: {"ns": m.apart[k], "n": m.apart_n[k]} for k, _ in APART_CLASSES},
        "idle_sites": [site_entry(s, symbolizer, m.apart["idle"]) for s in idle[:3]],
        "other_sleep_sites": [site_entry(s, symbolizer, m.apart["sleep"]) for s, _, _ in other[:3]],
        "dropped_waits": m.dropped_waits,
        "ebpf_dropped": m.ebpf_dropped,
        "ebpf_ignored_kinds": sorted(m.ignored_ebpf),
    }


def cell(r):
    """The reach as a table cell: '15%', 'n/a' (glibc column), '-' (not measured)."""
    if r is None:
        return "-"
    if r["reach_pct"] is None:
        return "n/a" if r["column"] == "glibc" else "no waits"
    return pct_text(r["reach_pct"]) + (f" ({pct_text(r['reach_algorithm_pct'])} alg.)"
                                       if r["reach_algorithm_pct"] != r["reach_pct"] else "")




def text_lines(r, table, shown):
    """The report's Reach section (TABLE, SHOWN: common.table and common.shown)."""
    if r is None:
        return []
    out = [f"reach (which of the lock waiting the compared variants swap; docs/reach.md; "
           f"{r['processes']} process(es){', with eBPF attribution' if r['ebpf'] else ''}):",
           f"  lock waiting: {fmt_ns(r['lock_wait_ns'])} in all"]
    rows = [["class", "time", "waits", "share", "swapped"]]
    for c in r["classes"]:
        if not c["seen"]:
            rows.append([c["label"], "-", "-", "-", "no"])
            continue
        rows.append([c["label"], fmt_ns(c["ns"]), c["n"], pct_text(c["share"]), "yes" if c["swapped"] else "no"])
    notes = ["what"] + [c["note"] for c in r["classes"]]
    out += ["  " + line + "  " + note for line, note in zip(table(rows, right_from=1), notes)]
    if r["reach_pct"] is None:
        out.append(f"  reach: {r['reach_why']}")
        if r["column"] == "glibc":
            out.append("    (lockswap runs glibc's own locks here: their waits are glibc's, invisible "
                       "unprivileged" + (f"; eBPF: glibc's locks are {pct_text(r['glibc_lock_pct'])} of the "
                                         "waiting, what a native variant would swap)" if r["glibc_lock_pct"]
                                         is not None else ")"))
    else:
        out.append(f"  reach: {pct_text(r['reach_pct'])} of the lock waiting is swapped "
                   f"({pct_text(r['reach_algorithm_pct'])} by algorithm)")
    if r["warning"]:
        out.append(f"  WARNING: {r['warning']}")
    if r["dropped_waits"]:
        out.append(f"  {r['dropped_waits']} waits found no room in the library's wait-site table: "
                   "the classes from wait records undercount")
    if r.get("ebpf_dropped"):
        what = ", ".join(f"{k}={n}" for k, n in sorted(r["ebpf_dropped"].items()))
        out.append(f"  eBPF attribution dropped events ({what}: lost by the kernel's buffers, or no room in "
                   "its maps): its classes undercount")
    if r["ebpf_ignored_kinds"]:
        out.append(f"  eBPF records of kinds {', '.join(r['ebpf_ignored_kinds'])} not added: the library "
                   "counted the same waits")

    def sites(title, items, extra=lambda s: ""):
        if not items:
            return []
        rows = [["#", "site", "calls", "waits", "time", "max", "share"]]
        for i, s in enumerate(items, 1):
            rows.append([i, s["site"][:60] + extra(s), ",".join(s["calls"]) or "-", s["n"], fmt_ns(s["ns"]),
                         fmt_ns(s["max_ns"]), pct_text(s["share"])])
        return [title] + ["  " + line for line in table(rows, right_from=2)]
    out += sites(f"  top own futex sites (of {r['futex_sites_total']}; share of the lock waiting):",
                 r["futex_sites"])
    out += sites("  spin-delay sites (share of the lock waiting):", r["spin_delay_sites"],
                 lambda s: f"  <{s['recognised']}>")
    if r["probes"]:
        rows = [["app", "kind", "name", "waits", "time"]]
        rows += [[p["app"], p["kind"], p["name"][:48], p["n"], fmt_ns(p["ns"])] for p in r["probes"]]
        out += [f"  application probes (top {len(r['probes'])} of {r['probes_total']}; a breakdown of the "
                "waits above by the application's names, not added to them):"]
        out += ["  " + line for line in table(rows, right_from=3)]
    apart = r["apart"]
    out.append("  apart from lock waiting (not in the total): " + ", ".join(
        f"{label} {fmt_ns(apart[k]['ns'])} ({apart[k]['n']})" for k, label in APART_CLASSES))
    out += sites(f"  top condition-wait sites (of {r['cond_sites_total']}; a condvar may be a lock's sleep, "
                 "e.g. WiredTiger's rwlocks; share of the condition waits):", r["cond_sites"],
                 lambda s: f"  <lock sleep: {s['lock_sleep']}>" if s["lock_sleep"] else "")
    out += sites("  top idle sites (share of the idle waits):", r["idle_sites"])
    return [shown(line) for line in out]
