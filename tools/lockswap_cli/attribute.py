"""lockswap attribute: where a process tree waits, measured exactly from the kernel (root, eBPF).

Runs COMMAND (or watches the tree of --pid) under bpftrace with tools/attribute/waits.bt (and
pg_probes.bt for --pg-probes), then writes lockswap-v1 records:

  wait    src=ebpf pid comm kind site n ns call via stack
  probe   src=ebpf app=postgres kind=lwlock|heavyweight name mode [tag] n ns
  dropped src=ebpf lost waits pids probes regs

kind of a wait: lockswap, glibc_lock, cond, glibc_internal, futex (futex waits, told apart by
their frames), idle, delay (from the syscall). docs/attribution.md is the method and its limits.
The frames: ip and the return addresses the scan of the user stack found (waits.bt says how),
turned into module+offset through /proc/PID/maps, read while the processes live (at each fork,
exec and executable mmap the tracer reports, and every POLL_S), and into symbols by addr2line (symbolize.py).
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from .common import PROG, warn
from .symbolize import Symbolizer

SKIP = 77                 # ctest's SKIP_RETURN_CODE: eBPF cannot be used here
POLL_S = 0.25             # /proc/PID/maps re-read period
READY_TIMEOUT_S = 120.0   # bpftrace compiling and attaching
MAX_KEYS = 16384          # BPFTRACE_MAP_KEYS_MAX; the programs refuse new keys a little before
SCAN_WORDS = 48           # user stack words scanned for return addresses
READY_MAGIC = 0x3ffffff7  # getpgid() of this (no such pid) makes the last probe say "ready"
READY_PROBE = ("tracepoint:syscalls:sys_enter_getpgid\n/args->pid == %d/\n"
               "{\n  printf(\"lockswap-attribute ready\\n\");\n}\n")
PG_BIN = "/usr/lib/postgresql/15/bin/postgres"

# x86_64 syscall numbers of the waits waits.bt times
SYSCALLS = {202: "futex", 449: "futex_waitv", 455: "futex_wait", 232: "epoll_wait", 281: "epoll_pwait",
            441: "epoll_pwait2", 7: "poll", 271: "ppoll", 23: "select", 270: "pselect6", 43: "accept",
            288: "accept4", 45: "recvfrom", 47: "recvmsg", 0: "read", 35: "nanosleep", 230: "clock_nanosleep"}
KINDS = {1: "futex", 2: "idle", 3: "delay"}
LWLOCK_MODES = {0: "exclusive", 1: "shared", 2: "wait_until_free"}
PG_LOCKMODES = {1: "AccessShareLock", 2: "RowShareLock", 3: "RowExclusiveLock", 4: "ShareUpdateExclusiveLock",
                5: "ShareLock", 6: "ShareRowExclusiveLock", 7: "ExclusiveLock", 8: "AccessExclusiveLock"}
PG_LOCKTAGS = {0: "relation", 1: "extend", 2: "frozenid", 3: "page", 4: "tuple", 5: "transaction",
               6: "virtualxid", 7: "spectoken", 8: "object", 9: "userlock", 10: "advisory"}

# Module classes and the pthread API by symbol (glibc 2.36's internal names included).
LIBC_RE = re.compile(r"(^|/)(libc\.so|libc-2|libpthread|ld-linux|ld64\.so|ld-2)")
LOCKSWAP_RE = re.compile(r"(^|/)liblockswap[^/]*\.so")
COND_RE = re.compile(r"pthread_cond|cnd_|__condvar|condition_variable")
GLIBC_LOCK_RE = re.compile(r"pthread_mutex|pthread_rwlock|pthread_spin|pthread_barrier|mtx_|sem_wait|"
                           r"sem_timedwait|sem_clockwait|__new_sem|__old_sem|^__lll_lock_wait$|"
                           r"__pthread_mutex|__pthread_rwlock|do_futex_wait")
SYSCALL_FN_RE = re.compile(r"^syscall$")
# liblockswap's syscall() pass-through (preload/stats/waits.cpp): a wait whose only liblockswap frames
# are these is the program's own futex lock, not one of lockswap's sleeps (those have
# lockswap::arch::futex_wait and the lock's slow path under them).
LOCKSWAP_PASSTHROUGH_RE = re.compile(r"^(syscall|timed_syscall)$")
# liblockswap's condition-wait sleeper (preload/pthread/mutex.cpp: cond waits sleep through
# CancellableSleeper<PlainSleeper>; semaphores through CancellableSleeper<SemPlainSleeper>).
LOCKSWAP_COND_RE = re.compile(r"CancellableSleeper<lockswap::PlainSleeper>|cond_wait_native")
# The library functions a wait goes through (the look-ahead past a stale frame): acquiring or
# waiting, never releasing (an unlock does not sleep).
WAIT_API_RE = re.compile(r"(pthread_mutex_(timed|clock)?lock|pthread_rwlock_(timed|clock)?(rd|wr)lock|"
                         r"rwlock_(rd|wr)lock_full|sem_(timed|clock)?wait|sem_wait_slow|pthread_cond_(timed|clock)?wait|"
                         r"__pthread_cond_wait|lll_lock_wait|pthread_(timed|clock)?join|select|poll|epoll_wait|"
                         r"nanosleep|usleep|sleep|accept|recv|lockswap::.*(lock|wait))", re.I)


def attribute_parser(add):
    p = add(prog=f"{PROG} attribute",
            help="where a process tree waits, from the kernel (root, bpftrace)",
            description="Run COMMAND (or watch the tree of --pid) under bpftrace and write lockswap-v1 "
                        "wait/probe/dropped records: every blocking futex wait, idle wait "
                        "(epoll/poll/select/accept/socket reads) and delay (nanosleep, select with no "
                        "descriptors) of the tree, timed in the kernel and attributed to a call site. "
                        "Needs root (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN) and bpftrace; without "
                        "them it says what is missing and exits 77. docs/attribution.md has the method.",
            formatter_class=argparse.RawDescriptionHelpFormatter,
            epilog="examples:\n"
                   f"  {PROG} attribute --out /tmp/w.txt -- ./server --threads 16\n"
                   f"  {PROG} attribute --pid $(pidof mariadbd) --duration 15 --out /tmp/w.txt\n"
                   f"  {PROG} attribute --pg-probes --pid $(head -1 $PGDATA/postmaster.pid) --duration 15")
    p.add_argument("--out", metavar="FILE", help="write the records to FILE (default: stdout)")
    p.add_argument("--pg-probes", action="store_true",
                   help="also PostgreSQL's lwlock/lock wait USDT probes (probe records)")
    p.add_argument("--pg-bin", metavar="PATH", default=None,
                   help=f"the postgres executable for --pg-probes (default: the tree's, else {PG_BIN})")
    p.add_argument("--pid", type=int, metavar="PID", help="watch this process and what it forks from now on")
    p.add_argument("--duration", type=float, metavar="S",
                   help="stop after S seconds (with --pid; with COMMAND, COMMAND is left running)")
    p.add_argument("--max-keys", type=int, default=MAX_KEYS, metavar="N",
                   help=f"entries per eBPF map (default {MAX_KEYS}); full maps are counted in 'dropped'")
    p.add_argument("--scan", type=int, default=SCAN_WORDS, metavar="WORDS",
                   help=f"user stack words scanned for return addresses (default {SCAN_WORDS}, at most 96)")
    p.add_argument("--top", type=int, default=8, metavar="N", help="sites per kind in the summary on stderr")
    p.add_argument("--bpftrace", default=os.environ.get("BPFTRACE", "bpftrace"), metavar="PATH",
                   help="the bpftrace program (default: bpftrace on PATH, or $BPFTRACE)")
    p.add_argument("--keep-program", metavar="FILE", help="also write the bpftrace program run to FILE")
    p.add_argument("--ready-file", metavar="FILE",
                   help="create FILE once the programs are attached (a driver starts its load then); "
                        "SIGINT or SIGTERM ends the tracing")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    return p


# ------------------------------------------------------------------ pre-flight

def _capabilities():
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def missing_requirements(bpftrace):
    """What keeps eBPF from loading here, as sentences (empty: nothing known)."""
    why = []
    caps = _capabilities()
    cap_sys_admin, cap_perfmon, cap_bpf = 1 << 21, 1 << 38, 1 << 39
    if not (caps & cap_sys_admin or (caps & cap_bpf and caps & cap_perfmon)):
        why.append("CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): run as root")
    if not shutil.which(bpftrace):
        why.append(f"bpftrace ({bpftrace} not found; apt-get install bpftrace)")
    if os.uname().machine != "x86_64":
        why.append(f"an x86_64 kernel (waits.bt reads x86_64 pt_regs; this is {os.uname().machine})")
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        why.append("kernel BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF)")
    if not why and not _tracefs_ready():
        why.append("tracefs (mount -t tracefs nodev /sys/kernel/tracing failed)")
    return why


def _tracefs_ready():
    """bpftrace reads the syscall tracepoints' formats from tracefs: mount it where it is not."""
    for d in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if os.path.isdir(os.path.join(d, "events")):
            return True
    r = subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], capture_output=True)
    return r.returncode == 0 and os.path.isdir("/sys/kernel/tracing/events")


def data_dir():
    """tools/attribute beside the package: source tree, build tree and install alike."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "attribute")


def build_program(roots, pg_bin, max_keys, scan):
    d = data_dir()
    with open(os.path.join(d, "waits.bt")) as fh:
        text = fh.read()
    limit = str(max(max_keys - 64, 16))
    text = text.replace("// @ROOTS@", " ".join(f"@pids[{int(r)}] = 1;" for r in roots) + f" @npids = {len(roots)};")
    text = text.replace("@MAXKEYS@", limit).replace("@SCAN@", str(scan)).replace("@THREAD_SIZE@", "16384")
    text = text.replace("@MAGIC@", str(READY_MAGIC)).replace("// @READY@", "// (the ready probe: last)")
    if pg_bin:
        with open(os.path.join(d, "pg_probes.bt")) as fh:
            text += "\n" + fh.read().replace("@PG_BIN@", pg_bin).replace("@MAXKEYS@", limit)
    return text + "\n" + READY_PROBE % READY_MAGIC


# ------------------------------------------------------------------ the maps of the traced processes

class Maps:
    """Executable file mappings per process, merged over every read of /proc/PID/maps."""

    def __init__(self):
        self.maps = {}       # pid -> {(start, end, offset, path)}
        self.parent = {}     # pid -> the pid it was forked from
        self.live = set()    # pids to re-read
        self.lock = threading.Lock()

    def read(self, pid):
        try:
            with open(f"/proc/{pid}/maps") as fh:
                lines = fh.read().splitlines()
        except OSError:
            with self.lock:
                self.live.discard(pid)
            return
        got = set()
        for line in lines:
            parts = line.split(None, 5)
            if len(parts) < 6 or "x" not in parts[1] or not parts[5].startswith("/"):
                continue
            lo, hi = parts[0].split("-")
            got.add((int(lo, 16), int(hi, 16), int(parts[2], 16), parts[5].removesuffix(" (deleted)")))
        with self.lock:
            self.maps.setdefault(pid, set()).update(got)

    def add(self, pid, parent=None):
        try:
            with open(f"/proc/{pid}/status") as fh:
                tgid = next((int(l.split()[1]) for l in fh if l.startswith("Tgid:")), pid)
        except (OSError, ValueError):
            tgid = pid
        if tgid != pid:
            return               # a thread: its group's maps are read already
        with self.lock:
            if parent is not None:
                self.parent.setdefault(pid, parent)
            self.live.add(pid)
        self.read(pid)

    def poll(self):
        with self.lock:
            pids = list(self.live)
        for pid in pids:
            self.read(pid)

    def sorted_for(self, pid):
        """The mappings of PID, else of the nearest ancestor whose were read (a fork that exited
        between two reads has its parent's)."""
        seen = set()
        while pid is not None and pid not in seen:
            seen.add(pid)
            if self.maps.get(pid):
                return sorted(self.maps[pid])
            pid = self.parent.get(pid)
        return []


def locate(maps, addr):
    best = None
    for start, end, offset, path in maps:
        if start <= addr < end:
            best = (path, addr - start + offset)   # the last read wins over an older overlapping one
    return best


def descendants(root):
    """ROOT and every process below it now (from /proc/*/stat's ppid)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                stat = fh.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


# ------------------------------------------------------------------ bpftrace's output

MAP_RE = re.compile(r"^@(wn|wns)\[(\d+), (.*), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+)\]: (\d+)$")
PG_RE = re.compile(r"^@(pgn|pgns)\[(\d+), (\d+), (.*), (\d+)\]: (\d+)$")
SCALAR_RE = re.compile(r"^@(full_waits|full_pids|full_probes|regs_bad): (\d+)$")
LOST_RE = re.compile(r"Lost (\d+) events")


def parse_output(lines):
    waits, probes, scalars, lost = {}, {}, {}, 0
    for line in lines:
        m = MAP_RE.match(line)
        if m:
            key = (int(m.group(2)), m.group(3), int(m.group(4)), int(m.group(5)),
                   tuple(int(m.group(i)) for i in range(6, 14)))
            waits.setdefault(key, [0, 0])[0 if m.group(1) == "wn" else 1] = int(m.group(14))
            continue
        m = PG_RE.match(line)
        if m:
            key = (int(m.group(2)), int(m.group(3)), m.group(4), int(m.group(5)))
            probes.setdefault(key, [0, 0])[0 if m.group(1) == "pgn" else 1] = int(m.group(6))
            continue
        m = SCALAR_RE.match(line)
        if m:
            scalars[m.group(1)] = int(m.group(2))
            continue
        m = LOST_RE.search(line)
        if m:
            lost += int(m.group(1))
    return waits, probes, scalars, lost


# ------------------------------------------------------------------ classification

def enc(text):
    """A record value: no spaces, control bytes, '=' or '%' (percent-encoded), never empty."""
    out = "".join(c if (0x20 < ord(c) < 0x7f and c not in "=%") else "".join(f"%{b:02X}" for b in c.encode())
                  for c in str(text))
    return out or "-"


def classify(kind, frames):
    """(kind, site frame, via symbol) of one wait. FRAMES: [(module path or None, offset, function)],
    the ip first, then the return addresses found in executable mappings."""
    if not frames:
        return ("futex" if kind == 1 else KINDS[kind]), None, None
    frames = [f if len(f) > 3 else (*f, None) for f in frames]
    # The frames inside libc/ld.so and liblockswap come first (a scan may interleave a stale
    # frame of the other): the first frame in neither is the call site.
    j = 0
    while j < len(frames) and frames[j][0] and (LIBC_RE.search(frames[j][0]) or LOCKSWAP_RE.search(frames[j][0])):
        j += 1
    # a stale program frame inside the library frames: a waiting API frame just after it (only
    # when the first program frame's call did not go to an import: one that called through the
    # PLT says which API it entered, below)
    for m in range(j + 1, min(j + 4, len(frames)) if j < len(frames) and frames[j][3] is None else 0):
        f = frames[m]
        if f[0] and f[2] and (LIBC_RE.search(f[0]) or LOCKSWAP_RE.search(f[0])) and WAIT_API_RE.search(f[2]):
            j = m
            while j < len(frames) and frames[j][0] and (LIBC_RE.search(frames[j][0]) or LOCKSWAP_RE.search(frames[j][0])):
                j += 1
            break
    inner = [f for f in frames[:j] if f[0] and (LIBC_RE.search(f[0]) or LOCKSWAP_RE.search(f[0]))]
    site = frames[j] if j < len(frames) else frames[-1]
    libc = [f[2] or "" for f in inner if LIBC_RE.search(f[0])]
    # the import the site called (sem_wait for a call to sem_wait@plt): the API it entered,
    # whatever frames a tail call or the scan lost in between (not when liblockswap answered)
    called = site[3] if len(site) > 3 and j < len(frames) else None
    if called and inner and not any(LOCKSWAP_RE.search(f[0]) for f in inner):
        libc.append(called)
    ls = [f[2] or "" for f in inner if LOCKSWAP_RE.search(f[0])]
    via = (ls[-1] if ls else None) or (libc[-1] if libc else None)
    if called and not ls:
        via = called
    if kind != 1:
        return KINDS[kind], site, via
    if called and SYSCALL_FN_RE.match(called):
        return "futex", site, called             # the program called syscall() itself: its own lock
    if ls and all(LOCKSWAP_PASSTHROUGH_RE.match(n) for n in ls):
        return "futex", site, "syscall"          # through lockswap's syscall(): the program's own lock
    if ls:
        cond = any(COND_RE.search(n) or LOCKSWAP_COND_RE.search(n) for n in ls)
        return ("cond" if cond else "lockswap"), site, via
    if not inner:
        return "futex", frames[0], None          # a syscall instruction of the program's own
    if any(COND_RE.search(n) for n in libc):
        return "cond", site, via
    if any(GLIBC_LOCK_RE.search(n) for n in libc):
        return "glibc_lock", site, via
    if libc and all(SYSCALL_FN_RE.match(n) for n in libc):
        return "futex", site, via                # syscall(SYS_futex, ...) called by the program
    return "glibc_internal", site, via


ARGS_RE = re.compile(r"\((?:[^()]|\([^()]*\))*\)( const)?$")


def short(fn):
    """A demangled C++ name without its parameter list."""
    return ARGS_RE.sub("", fn) if fn and fn.endswith(")") or (fn or "").endswith(") const") else fn


def frame_name(fr):
    if fr is None:
        return "-"
    path, off, fn = fr[:3]
    where = f"{os.path.basename(path)}+{off:#x}" if path else f"{off:#x}"
    return f"{where}:{short(fn)}" if fn else where


# ------------------------------------------------------------------ running

def run_bpftrace(args, program, roots, maps, stop_event, child_release, attached):
    env = dict(os.environ, BPFTRACE_MAP_KEYS_MAX=str(args.max_keys), BPFTRACE_NO_CPP_DEMANGLE="1",
               BPFTRACE_STRLEN="64")
    fd, path = tempfile.mkstemp(prefix="lockswap-attribute-", suffix=".bt")
    with os.fdopen(fd, "w") as fh:
        fh.write(program)
    if args.keep_program:
        with open(args.keep_program, "w") as fh:
            fh.write(program)
    proc = subprocess.Popen([args.bpftrace, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True, errors="replace", start_new_session=True)
    out_lines, err_lines, ready = [], [], threading.Event()

    def reader():
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.startswith("lockswap-attribute "):
                w = line.split()
                if w[1] == "ready":
                    ready.set()
                elif w[1] == "fork" and len(w) == 4:
                    maps.add(int(w[3]), int(w[2]))
                elif w[1] in ("exec", "map") and len(w) == 3:
                    maps.add(int(w[2]))
                continue
            out_lines.append(line)

    def err_reader():
        for line in proc.stderr:
            err_lines.append(line.rstrip("\n"))

    threads = [threading.Thread(target=reader, daemon=True), threading.Thread(target=err_reader, daemon=True)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready.is_set():
        if proc.poll() is not None or time.monotonic() > deadline:
            break
        try:
            os.getpgid(READY_MAGIC)      # the last probe's trigger (ESRCH)
        except OSError:
            pass
        ready.wait(0.05)
    os.unlink(path)
    if not ready.is_set():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for t in threads:
            t.join(5)
        errs = [l for l in err_lines if "RLIMIT_MEMLOCK" not in l][-12:]
        return None, errs
    try:
        return _traced(args, proc, threads, out_lines, err_lines, maps, stop_event, child_release, attached)
    finally:
        if proc.poll() is None:      # an exception on the way: never leave bpftrace attached
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _traced(args, proc, threads, out_lines, err_lines, maps, stop_event, child_release, attached):
    child_release()
    attached.set()
    if args.ready_file:
        with open(args.ready_file, "w") as fh:
            fh.write(f"{os.getpid()}\n")
    while not stop_event.is_set():
        maps.poll()
        stop_event.wait(POLL_S)
    maps.poll()
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for t in threads:
        t.join(10)
    return out_lines + err_lines, None


def cmd_attribute(args, parser):
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if cmd and args.pid:
        parser.error("give either --pid or -- COMMAND, not both")
    if not cmd and not args.pid:
        parser.error("nothing to watch: -- COMMAND or --pid PID")
    if args.duration is not None and args.duration <= 0:
        parser.error("--duration must be positive")
    if not 1 <= args.scan <= 96:
        parser.error("--scan must be 1 to 96")
    if args.max_keys < 256:
        parser.error("--max-keys must be at least 256")
    for name in ("waits.bt",) + (("pg_probes.bt",) if args.pg_probes else ()):
        if not os.path.isfile(os.path.join(data_dir(), name)):
            warn(f"attribute: {os.path.join(data_dir(), name)} is missing (installed with the command)")
            return 1
    why = missing_requirements(args.bpftrace)
    if why:
        warn("attribute: eBPF cannot be used here; missing: " + "; ".join(why))
        return SKIP
    pg_bin = None
    if args.pg_probes:
        pg_bin = args.pg_bin
        if not pg_bin and args.pid:
            try:
                exe = os.readlink(f"/proc/{args.pid}/exe")
                pg_bin = exe if os.path.basename(exe) == "postgres" else None
            except OSError:
                pass
        pg_bin = pg_bin or PG_BIN
        if not os.path.isfile(pg_bin):
            warn(f"attribute: --pg-probes: {pg_bin} not found (--pg-bin PATH)")
            return SKIP

    maps = Maps()
    stop_event = threading.Event()
    child = None
    if cmd:
        # The command waits behind a gate (python reading a pipe) until the tracer is attached,
        # then execs in the same pid: nothing it does happens before the tracing.
        r, w = os.pipe()
        gate = ("import os, sys\nfd = int(sys.argv[1])\nif os.read(fd, 3) != b'go\\n': sys.exit(125)\n"
                "os.close(fd)\ntry:\n    os.execvp(sys.argv[2], sys.argv[2:])\n"
                "except OSError as e:\n    print(f'lockswap attribute: {sys.argv[2]}: {e.strerror}', file=sys.stderr)\n"
                "    sys.exit(127)\n")
        child = subprocess.Popen([sys.executable, "-c", gate, str(r)] + cmd, pass_fds=(r,))
        os.close(r)
        roots = [child.pid]

        def release():
            try:
                os.write(w, b"go\n")
            except BrokenPipeError:
                pass                 # the gate is gone: the loop below sees the child's status
            os.close(w)
            maps.add(child.pid)
    else:
        if not os.path.isdir(f"/proc/{args.pid}"):
            warn(f"attribute: no process {args.pid}")
            return 1
        roots = [p for p in descendants(args.pid)]

        def release():
            for p in roots:
                maps.add(p)

    result, attached, interrupted = {}, threading.Event(), threading.Event()

    def trace():
        result["out"] = run_bpftrace(args, build_program(roots, pg_bin, args.max_keys, args.scan),
                                     roots, maps, stop_event, release, attached)
    # SIGINT/SIGTERM end the tracing (the records are still written); a terminal's Ctrl-C
    # reaches COMMAND too, bpftrace runs in a session of its own.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: interrupted.set())
    tracer = threading.Thread(target=trace, daemon=True)
    tracer.start()
    status = 0
    t_end = None
    while tracer.is_alive() and not interrupted.is_set():
        if child is not None and child.poll() is not None:
            break
        if child is None and not os.path.isdir(f"/proc/{args.pid}"):
            break
        if attached.is_set() and args.duration and t_end is None:
            t_end = time.monotonic() + args.duration    # the duration counts from the attach
        if t_end is not None and time.monotonic() >= t_end:
            break
        tracer.join(0.1)
    if child is not None and interrupted.is_set() and child.poll() is None:
        try:
            child.wait(timeout=5)        # a Ctrl-C reached the command too: let it finish
        except subprocess.TimeoutExpired:
            warn(f"attribute: interrupted; {cmd[0]} (pid {child.pid}) runs on untraced")
    if child is not None and child.poll() is not None:
        status = child.returncode
    stop_event.set()
    tracer.join()
    lines, errs = result.get("out", (None, ["the tracer did not start"]))
    if lines is None:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        warn("attribute: bpftrace could not load the programs (eBPF unavailable or refused):")
        for e in errs:
            warn("attribute:   " + e)
        return SKIP
    if status < 0:
        status = 128 - status
    records, summary = make_records(lines, maps, args.top)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("".join(r + "\n" for r in records))
    else:
        sys.stdout.write("".join(r + "\n" for r in records))
        sys.stdout.flush()
    for line in summary:
        print(line, file=sys.stderr)
    return status


class ModuleCode:
    """The bytes before a return address in its module file, and the file's PLT sections."""

    def __init__(self):
        self.files, self.plts = {}, {}

    def _file(self, path):
        if path not in self.files:
            try:
                self.files[path] = open(path, "rb")
            except OSError:
                self.files[path] = None
        return self.files[path]

    def close(self):
        for fh in self.files.values():
            if fh is not None:
                fh.close()
        self.files = {}

    def call_target(self, path, off):
        """The file offset a direct call (e8 rel32) ending at OFF goes to, else None (an
        indirect call, or unreadable)."""
        fh = self._file(path)
        if fh is None or off < 5:
            return None
        try:
            fh.seek(off - 5)
            b = fh.read(5)
        except OSError:
            return None
        if len(b) != 5 or b[0] != 0xE8:
            return None
        t = off + int.from_bytes(b[1:], "little", signed=True)
        return t if t >= 0 else None

    def in_plt(self, path, off):
        ranges = self._plt(path)[0]
        return ranges is None or any(lo <= off < hi for lo, hi in ranges)

    def plt_name(self, path, off):
        """The imported function a call to the .plt stub at file offset OFF reaches (sem_wait for
        sem_wait@plt), from .rela.plt and .dynsym; None when OFF is no such stub."""
        names = self._plt(path)[1]
        return names.get(off)

    def _plt(self, path):
        if path not in self.plts:
            try:
                self.plts[path] = self._read_plt(path)
            except (OSError, ValueError, IndexError, AttributeError):
                self.plts[path] = (None, {})
        return self.plts[path]

    def _read_plt(self, path):
        """([(offset, end)] of .plt, .plt.sec, .plt.got, {stub offset: name}); (None, {}) when
        unknown (every target then passes)."""
        fh = self._file(path)
        if fh is None:
            return None, {}
        u = lambda b, i, n: int.from_bytes(b[i:i + n], "little")
        fh.seek(0)
        eh = fh.read(64)
        if eh[:4] != b"\x7fELF" or eh[4] != 2 or eh[5] != 1:
            return None, {}
        shoff, shentsize, shnum, shstrndx = u(eh, 40, 8), u(eh, 58, 2), u(eh, 60, 2), u(eh, 62, 2)
        if not shoff or shentsize < 64 or shnum > 4096 or shstrndx >= shnum:
            return None, {}
        fh.seek(shoff)
        sh = fh.read(shentsize * shnum)
        secs = [sh[i * shentsize:(i + 1) * shentsize] for i in range(shnum)]

        def data(sec, limit=1 << 24):
            fh.seek(u(sec, 24, 8))
            return fh.read(min(u(sec, 32, 8), limit))
        names = data(secs[shstrndx], 1 << 20)
        byname = {names[u(x, 0, 4):names.find(b"\0", u(x, 0, 4))]: x for x in secs}
        ranges = [(u(x, 24, 8), u(x, 24, 8) + u(x, 32, 8)) for n, x in byname.items()
                  if n in (b".plt", b".plt.sec", b".plt.got")]
        stubs = {}
        rela = byname.get(b".rela.plt")
        if rela is not None and u(rela, 40, 4) < shnum:
            dynsym = secs[u(rela, 40, 4)]
            dynstr = data(secs[u(dynsym, 40, 4)] if u(dynsym, 40, 4) < shnum else dynsym)
            syms, rel = data(dynsym), data(rela)
            imported = []
            for i in range(0, len(rel) - 23, 24):
                k = u(rel, i + 8, 8) >> 32
                st = u(syms, k * 24, 4) if (k + 1) * 24 <= len(syms) else None
                imported.append(dynstr[st:dynstr.find(b"\0", st)].decode("ascii", "replace") if st is not None else None)
            sec = byname.get(b".plt.sec")
            if sec is not None:                       # IBT: one 16-byte stub per import, no PLT0
                base = u(sec, 24, 8)
                stubs = {base + 16 * i: n for i, n in enumerate(imported) if n}
            elif b".plt" in byname:                   # PLT0, then one 16-byte stub per import
                base = u(byname[b".plt"], 24, 8) + 16
                stubs = {base + 16 * i: n for i, n in enumerate(imported) if n}
        return ranges, stubs


def sym_name(fr):
    """The function of a frame; '~name' when the module has no line information for it (a
    stripped module's nearest exported symbol, which may not be the function)."""
    fn = fr["function"]
    return None if not fn else (fn if fr["source"] else "~" + fn)


def classify_one(kind, chain, sym, code, targets):
    """(kind, site, via, frames) of one wait key: CHAIN its validated (module, offset) frames."""
    frames = [(p, o, sym_name(sym.get(p, o)) if p else None,
               code.plt_name(p, targets[(p, o)]) if p and targets.get((p, o)) is not None else None)
              for p, o in chain]
    return (*classify(kind, frames), frames)


def make_records(lines, maps, top):
    waits, probes, scalars, lost = parse_output(lines)
    sym = Symbolizer()
    resolved = {}
    sorted_maps = {}
    for (pid, comm, kind, nr, addrs) in waits:
        if pid not in sorted_maps:
            sorted_maps[pid] = maps.sorted_for(pid)
        chain = []
        for i, a in enumerate(addrs):
            if a == 0:
                continue
            loc = locate(sorted_maps[pid], a)
            if loc is None:
                if i == 0:
                    chain.append((None, a))   # ip outside any file mapping (JIT, vDSO): kept
                continue                      # a scanned word outside executable files: not a frame
            chain.append(loc)
            sym.want(*loc)
        resolved[(pid, addrs)] = chain
    sym.budget_s = 60.0
    sym.resolve()
    # The scan's stale return addresses: a direct call before a return address must fit the
    # frame inside it. In the same module: the target is not a PLT stub and its function is that
    # frame's (a tail call in between fails this: the frame is lost, the site moves out one
    # caller). From another module: anything fits (a PLT stub, or a local function that
    # tail-called out). The targets are symbolized in a second batch.
    code = ModuleCode()
    targets = {}
    for chain in resolved.values():
        for path, off in chain[1:]:
            if path and (path, off) not in targets:
                targets[(path, off)] = code.call_target(path, off)
                if targets[(path, off)] is not None:
                    sym.want(path, targets[(path, off)] + 1)   # +1: want() takes return addresses
    sym.resolve()
    stale = [0]

    def calls(caller, callee):
        """Whether the return address CALLER can be the caller of frame CALLEE (unknown: yes)."""
        t = targets.get(caller)
        if t is None or not callee[0]:
            return True
        if callee[0] != caller[0]:
            return True      # through the PLT, or a local function that tail-called out: both fit
        if code.in_plt(caller[0], t):
            return False     # a call out of the module, but the frame inside is the module's own
        want_fn, got_fn = sym.get(*callee)["function"], sym.get(caller[0], t + 1)["function"]
        return not (want_fn and got_fn and want_fn != got_fn)

    def import_name(fr):
        t = targets.get(fr)
        return code.plt_name(fr[0], t) if t is not None else None

    def plain(name):
        """A symbol without glibc's internal prefixes and version suffix: __GI___nanosleep ->
        nanosleep, ___pthread_mutex_lock -> pthread_mutex_lock."""
        name = (name or "").split("@")[0]
        name = name[5:] if name.startswith("__GI_") else name
        return name.lstrip("_")

    def validated(chain):
        kept = chain[:1]
        for fr in chain[1:]:
            imp = import_name(fr)
            if imp and len(kept) >= 2 and kept[-1][0] != fr[0] and kept[-2][0] != fr[0]:
                # a call through the PLT to IMP: when the frame kept last is not IMP but the one
                # before it is, the last one is stale (a liblockswap frame between syscall() and
                # the program's own futex lock)
                names = [plain(sym.get(*k)["function"]) if k[0] else "" for k in kept[-2:]]
                if names[1] != plain(imp) and names[0] == plain(imp):
                    kept[-1] = fr
                    stale[0] += 1
                    continue
            if calls(fr, kept[-1]):
                kept.append(fr)
            elif len(kept) >= 2 and calls(fr, kept[-2]):
                kept[-1] = fr            # the frame kept last was the stale one
                stale[0] += 1
            else:
                stale[0] += 1
        return kept

    agg = {}
    try:
        classified = [(key, nn, classify_one(key[2], validated(resolved[(key[0], key[4])]), sym, code, targets))
                      for key, nn in waits.items()]
    finally:
        code.close()
    for (pid, comm, kind, nr, addrs), (n, ns), (k, site, via, frames) in classified:
        key = (pid, comm, k, frame_name(site), SYSCALLS.get(nr, str(nr)))
        a = agg.setdefault(key, {"n": 0, "ns": 0, "via": via, "stack": frames, "best": -1})
        a["n"] += n
        a["ns"] += ns
        if ns > a["best"]:
            a["best"], a["via"], a["stack"] = ns, via, frames
    records = []
    for (pid, comm, k, site, call), a in sorted(agg.items(), key=lambda kv: -kv[1]["ns"]):
        stack = ";".join(frame_name(f) for f in a["stack"][:8])
        records.append(f"lockswap-v1 wait src=ebpf pid={pid} comm={enc(comm)} kind={k} site={enc(site)} "
                       f"n={a['n']} ns={a['ns']} call={call} via={enc(short(a['via']) or '-')} stack={enc(stack)}")
    for (pid, kind, name, mode), (n, ns) in sorted(probes.items(), key=lambda kv: -kv[1][1]):
        if kind == 1:
            records.append(f"lockswap-v1 probe src=ebpf app=postgres pid={pid} kind=lwlock name={enc(name)} "
                           f"mode={LWLOCK_MODES.get(mode, mode)} n={n} ns={ns}")
        else:
            lockmode, tag = mode >> 8, mode & 0xff
            records.append(f"lockswap-v1 probe src=ebpf app=postgres pid={pid} kind=heavyweight "
                           f"name={PG_LOCKMODES.get(lockmode, lockmode)} mode={lockmode} "
                           f"tag={PG_LOCKTAGS.get(tag, tag)} n={n} ns={ns}")
    records.append(f"lockswap-v1 dropped src=ebpf lost={lost} waits={scalars.get('full_waits', 0)} "
                   f"pids={scalars.get('full_pids', 0)} probes={scalars.get('full_probes', 0)} "
                   f"regs={scalars.get('regs_bad', 0)} stale_frames={stale[0]}")
    return records, summary_lines(agg, probes, scalars, lost, top)


def fmt_ns(ns):
    return f"{ns / 1e9:.3f} s" if ns >= 1e8 else f"{ns / 1e6:.3f} ms"


def summary_lines(agg, probes, scalars, lost, top):
    out = []
    total = sum(a["ns"] for a in agg.values()) or 1
    by_kind = {}
    for (pid, comm, k, site, call), a in agg.items():
        s = by_kind.setdefault(k, {"n": 0, "ns": 0, "sites": {}})
        s["n"] += a["n"]
        s["ns"] += a["ns"]
        st = s["sites"].setdefault(site, [0, 0])
        st[0] += a["n"]
        st[1] += a["ns"]
    pids = {key[0] for key in agg}
    out.append(f"{PROG} attribute: {len(pids)} process(es), waits summed over their threads")
    for k, s in sorted(by_kind.items(), key=lambda kv: -kv[1]["ns"]):
        out.append(f"  {k:<15} n={s['n']:<10} {fmt_ns(s['ns']):>14}  {100.0 * s['ns'] / total:5.1f}%")
        for site, (n, ns) in sorted(s["sites"].items(), key=lambda kv: -kv[1][1])[:top]:
            out.append(f"      {n:>10} {fmt_ns(ns):>14}  {site}")
    if probes:
        out.append(f"{PROG} attribute: PostgreSQL probes (summed over processes)")
        pk = {}
        for (pid, kind, name, mode), (n, ns) in probes.items():
            label = f"lwlock {name}" if kind == 1 else f"heavyweight {PG_LOCKMODES.get(mode >> 8, mode >> 8)}"
            v = pk.setdefault(label, [0, 0])
            v[0] += n
            v[1] += ns
        for label, (n, ns) in sorted(pk.items(), key=lambda kv: -kv[1][1])[:max(top, 10)]:
            out.append(f"      {n:>10} {fmt_ns(ns):>14}  {label}")
    dropped = {k: v for k, v in scalars.items() if v} | ({"lost": lost} if lost else {})
    if dropped:
        out.append(f"{PROG} attribute: dropped: " + " ".join(f"{k}={v}" for k, v in sorted(dropped.items())))
    return out
