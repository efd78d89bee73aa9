#!/usr/bin/python3
"""tests/tools/report_test.py LOCKSWAP SYMBOLS_FIXTURE — `lockswap report` on hand-written
statistics files (fixtures/, format version 1 of the library's statistics records) and on one
generated at test time whose addresses point into SYMBOLS_FIXTURE (symbols_fixture.cpp built with
debug info), so the report must name its functions."""
import json
import os
import re
import shutil
import tempfile
import time

import cli_test_util as util
from cli_test_util import CliTestCase, elf_symbol, exec_segment, fixture

MARIADB = fixture("mariadbd-4711.stats")
POSTGRES = [fixture("postgres-201.stats"), fixture("postgres-202.stats")]
# Real dumps of fixtures/counts-rwsem.c (540,000 mutex and 540,000 rwlock calls) under rwsem:
# written by LOCKSWAP_STATS=counts (lock events only) and =profile (calls and tables too).
COUNTS_RWSEM = fixture("counts-rwsem.stats")
PROFILE_RWSEM = fixture("profile-rwsem.stats")
COUNTS_PID = 5955
# What the report said for MARIADB + POSTGRES before counts-only dumps were told apart:
# a profiled report must stay exactly that (paths written as @FIXTURES@).
FULL_MODE_ARGS = ("--top", "0", "--symbol-budget", "0", MARIADB, *POSTGRES)
FULL_MODE_TEXT = fixture("full-mode.report.txt")
FULL_MODE_JSON = fixture("full-mode.report.json")
HOT_MUTEX = 0x5581a0c0e040
HOT_FN = "lockswap_fixture::hot_site_function(int)"
COLD_FN = "lockswap_fixture::cold_site_function(int)"
HANDLER_FN = "lockswap_fixture::request_handler(int)"
SIDE_KEYS = {"count", "total_ns", "avg_ns", "p50_ns", "p99_ns", "max_ns", "hist"}
FRAME_KEYS = {"addr", "module", "offset", "function", "source", "inlined"}
STAT_KEYS = {"acq", "contended", "contended_pct", "rd_acq", "rd_contended", "pids", "wait", "hold"}


def report_json(test, *args):
    return json.loads(test.ok("report", "--json", *args).stdout)


def by_addr(items, addr):
    return next(s for s in items if s["addr"] == addr)


def process_row(text, pid):
    """The cells of PID's row in the processes table."""
    lines = text.splitlines()
    start = lines.index("processes:")
    return next(l.split() for l in lines[start + 2:] if l.split()[:1] == [str(pid)])


def sites_section(text):
    """The ranked call-site table's rows (after its title, up to the blank line)."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if re.match(r"top \d+ of \d+ call sites", l))
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        rows.append(line)
    return rows


def percent_encoded(path):
    """A path as the library writes it: bytes <= 0x20, '%' and 0x7f as %XX."""
    return "".join(chr(b) if 0x20 < b < 0x7f and b != 0x25 else f"%{b:02X}" for b in os.fsencode(path))


def symbolized_fixture(tmp, dir_name="bin dir", encode=lambda p: p.replace(" ", "%20")):
    """fixtures/symbolized.stats.in with its addresses placed in a copy of the symbols binary,
    loaded at an arbitrary base, in a directory DIR_NAME, the path written by ENCODE (by default
    as older dumps did: only spaces, as %20)."""
    exe_dir = os.path.join(tmp, dir_name)
    os.makedirs(exe_dir)
    exe = shutil.copy(util.EXTRA_ARGS[0], os.path.join(exe_dir, "symbols_fixture"))
    base = 0x5600_0000_0000
    p_offset, p_vaddr, p_memsz = exec_segment(exe)
    ip = lambda name: base + elf_symbol(exe, name) + 5   # a return address inside the function
    values = {"EXE": encode(exe), "MAP_START": base + p_vaddr,
              "MAP_END": base + p_vaddr + p_memsz, "MAP_OFFSET": p_offset,
              "HOT_IP": ip(HOT_FN), "COLD_IP": ip(COLD_FN), "HANDLER_IP": ip(HANDLER_FN)}
    with open(fixture("symbolized.stats.in")) as fh:
        text = fh.read()
    for k, v in values.items():
        text = text.replace(f"@{k}@", v if isinstance(v, str) else hex(v))
    path = os.path.join(tmp, "symbolized.stats")
    with open(path, "w") as fh:
        fh.write(text)
    return path


# Stands in for addr2line: logs how many addresses each run was given, answers nothing.
FAKE_ADDR2LINE = """#!/bin/sh
n=0
for a in "$@"; do case "$a" in 0x*) n=$((n + 1));; esac; done
echo "$n" >> "$(dirname "$0")/runs"
[ -n "$FAKE_ADDR2LINE_SLEEP" ] && sleep "$FAKE_ADDR2LINE_SLEEP"
exit 0
"""


def many_files_fixture(tmp, files, busy_sites):
    """A dump whose sites lie in FILES copies of the symbols binary: BUSY_SITES sites in the
    first, one in each other."""
    lines = ["lockswap-v1 begin pid=5 seq=1 start_ns=1 now_ns=2 mutex=futex rwlock=futex sem=glibc cid=rseq exe=x",
             "lockswap-v1 lock id=1 addr=0x1000 kind=mutex acq=1 contended=1"]
    site = 0
    for i in range(files):
        path = shutil.copy(util.EXTRA_ARGS[0], os.path.join(tmp, f"copy{i}"))
        base = (i + 1) << 32
        lines.append(f"lockswap-v1 map start={base:#x} end={base + (1 << 20):#x} offset=0 path={path}")
        for k in range(busy_sites if i == 0 else 1):
            site += 1
            lines.append(f"lockswap-v1 site id={site} lock=1 ip={base + 0x1000 + k:#x} op=lock acq=1 "
                         f"contended=1 wait_ns={site}")
    lines.append("lockswap-v1 end pid=5 seq=1")
    path = os.path.join(tmp, "many.stats")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


class ReportTest(CliTestCase):
    def fake_addr2line(self):
        bindir = os.path.join(self.tmp, "fakebin")
        os.makedirs(bindir)
        tool = os.path.join(bindir, "addr2line")
        with open(tool, "w") as fh:
            fh.write(FAKE_ADDR2LINE)
        os.chmod(tool, 0o755)
        return bindir, os.path.join(bindir, "runs")

    def test_addr2line_runs_bounded(self):
        """At most 64 files, 1000 addresses a run: 2500 sites in one file, one in each of 69 more."""
        bindir, runs = self.fake_addr2line()
        path = many_files_fixture(self.tmp, 70, 2500)
        p = self.ok("report", "--top", "0", path, env={"PATH": f"{bindir}:{os.environ['PATH']}"})
        with open(runs) as fh:
            counts = [int(x) for x in fh.read().split()]
        self.assertEqual(counts[:3], [1000, 1000, 500])     # the busiest file first, in batches
        self.assertEqual(counts[3:], [1] * 63)              # then 63 more files, one address each
        self.assertIn("6 more mapped files not symbolized (at most 64", p.stderr)

    def test_addr2line_time_bounded(self):
        bindir, runs = self.fake_addr2line()
        path = many_files_fixture(self.tmp, 3, 1)
        env = {"PATH": f"{bindir}:{os.environ['PATH']}", "FAKE_ADDR2LINE_SLEEP": "20"}
        start = time.monotonic()
        p = self.ok("report", "--symbol-budget", "1", path, env=env)
        self.assertLess(time.monotonic() - start, 10)
        self.assertIn("addr2line timed out", p.stderr)
        self.assertIn("symbolization took its whole budget (1 s)", p.stderr)
        with open(runs) as fh:
            self.assertEqual(len(fh.read().split()), 1)     # no second run once the budget is spent
        self.assertIn("copy0+0x", p.stdout)                # file+offset instead of names

    def test_help(self):
        out = self.ok("report", "--help").stdout
        for want in ("usage: lockswap report", "--json", "--png", "--sort", "lockswap-report-v1",
                     "upper bound"):
            self.assertIn(want, out)

    def test_last_dump_wins(self):
        rep = report_json(self, MARIADB)
        self.assertEqual([(p["pid"], p["seq"]) for p in rep["processes"]], [(4711, 2)])
        self.assertEqual(rep["totals"]["calls"], {"mutex": 500000, "rwlock": 20000, "cond": 3000, "sem": 0})
        self.assertEqual(rep["totals"]["events"], {"rwsem_opt_lock": 5000, "rwsem_sleep_writer": 1234})
        lock = by_addr(rep["locks"], HOT_MUTEX)
        self.assertEqual((lock["acq"], lock["contended"], lock["kind"]), (400000, 12000, "mutex"))
        wait = lock["wait"]
        self.assertEqual(wait["count"], 12000)
        self.assertEqual(wait["total_ns"], 1716000000)
        self.assertEqual(wait["avg_ns"], 1716000000 // 12000)
        self.assertEqual(wait["p50_ns"], 2 ** 13 - 1)     # rank 6000 falls in bucket 12
        self.assertEqual(wait["p99_ns"], 2 ** 21 - 1)     # rank 11880 falls in bucket 20
        self.assertEqual(wait["max_ns"], 12000000)
        self.assertEqual(lock["hold"]["p50_ns"], 2 ** 8 - 1)
        self.assertEqual(lock["hold"]["p99_ns"], 61000)  # bucket 15's bound, capped at the max

    def test_unknown_records_and_keys_ignored(self):
        path = os.path.join(self.tmp, "future.stats")
        with open(MARIADB) as src, open(path, "w") as dst:
            for line in src:
                dst.write(line.replace(" seq=2 ", " seq=2 future_key=xyz "))
                if line.startswith("lockswap-v1 lock id=2 "):
                    dst.write("lockswap-v1 numa_stats node=0 locks=3\n")
                    dst.write("lockswap-v2 lock id=9 addr=0x1 kind=mutex acq=77\n")
                    dst.write("lockswap-v1 lock id=8 addr=0x2 kind=mutex acq=5 shiny=yes\n")
        rep = report_json(self, path)
        self.assertEqual(by_addr(rep["locks"], HOT_MUTEX)["acq"], 400000)
        self.assertEqual(by_addr(rep["locks"], 0x2)["acq"], 5)
        self.assertNotIn(0x1, [s["addr"] for s in rep["locks"]])
        self.assertEqual(rep["locks_total"], 3)
        self.assertNotIn("shiny", json.dumps(rep))

    def test_multi_process_merge(self):
        rep = report_json(self, *POSTGRES)
        self.assertEqual(sorted(p["pid"] for p in rep["processes"]), [201, 202])
        # pid 202's second dump has no end record: its complete first dump is used.
        self.assertTrue(all(p["complete"] and p["seq"] == 1 for p in rep["processes"]))
        self.assertEqual(rep["totals"]["calls"]["sem"], 5100 + 7100)
        lock = by_addr(rep["locks"], 0x7f00aa000100)
        self.assertEqual((lock["acq"], lock["contended"], sorted(lock["pids"])), (12000, 1000, [201, 202]))
        self.assertEqual(lock["wait"]["total_ns"], 1000 * 40000)
        (site,) = rep["sites"]
        self.assertEqual((site["op"], site["acq"], site["contended"]), ("sem_wait", 12000, 1000))
        self.assertEqual(site["module"], "/opt/fixture/postgresql/15/bin/postgres")
        self.assertEqual(site["offset"], 0x1234 + 0x9f000)

    def test_no_pthread_calls_is_a_line(self):
        out = self.ok("report", *POSTGRES).stdout
        self.assertIn("no pthread/C11 lock calls at all", out)
        self.assertNotIn("no pthread/C11 lock calls", self.ok("report", MARIADB).stdout)

    def test_same_file_twice_counts_once(self):
        rep = report_json(self, MARIADB, MARIADB)
        self.assertEqual(len(rep["processes"]), 1)
        self.assertEqual(by_addr(rep["locks"], HOT_MUTEX)["acq"], 400000)

    def test_json_schema(self):
        rep = report_json(self, "--top", "0", MARIADB, *POSTGRES)
        self.assertEqual(rep["schema"], "lockswap-report-v1")
        self.assertEqual(rep["totals"]["processes"], 3)
        for p in rep["processes"]:
            self.assertLessEqual({"pid", "start_ns", "seq", "complete", "file", "exe", "variants",
                                  "calls", "events", "dropped", "acq", "contended"}, set(p))
            self.assertEqual(set(p["variants"]), {"mutex", "rwlock", "sem", "cid"})
        for s in rep["locks"] + rep["cond_locks"]:
            self.assertLessEqual(STAT_KEYS | {"addr", "kind", "exe"}, set(s))
        for s in rep["sites"] + rep["cond_sites"]:
            self.assertLessEqual(STAT_KEYS | {"rank", "op", "addr", "module", "offset", "lock_addrs",
                                              "lock_kind", "where", "backtrace"}, set(s))
            self.assertLessEqual(FRAME_KEYS, set(s["where"]))
            for fr in s["backtrace"]:
                self.assertEqual(FRAME_KEYS, set(fr))
        for s in rep["locks"] + rep["sites"] + rep["cond_locks"] + rep["cond_sites"]:
            for side in (s["wait"], s["hold"]):
                self.assertEqual(SIDE_KEYS, set(side))
                self.assertEqual(len(side["hist"]), 48)
                self.assertEqual(side["count"], sum(side["hist"]) or side["count"])
        self.assertEqual((rep["locks_total"], rep["sites_total"]), (3, 6))
        self.assertEqual([s["addr"] for s in rep["cond_locks"]], [0x5581a0c0f200])
        self.assertEqual([s["op"] for s in rep["cond_sites"]], ["wait"])
        waits = [s["wait"]["total_ns"] for s in rep["sites"]]
        self.assertEqual(waits, sorted(waits, reverse=True))
        self.assertEqual([s["rank"] for s in rep["sites"]], list(range(1, 7)))

    def test_library_frames_hidden(self):
        rep = report_json(self, MARIADB)
        site = rep["sites"][0]
        self.assertEqual(site["addr"], 0x5581a0412345)
        modules = [os.path.basename(f["module"]) for f in site["backtrace"]]
        self.assertEqual(modules, ["mariadbd", "mariadbd", "mariadbd", "libc.so.6"])
        # No debug info and no file: file+offset in the text.
        self.assertIn("mariadbd+0x411345", self.ok("report", MARIADB).stdout)

    def test_top_and_sort(self):
        rep = report_json(self, "--top", "1", "--sort", "acq", MARIADB)
        self.assertEqual(len(rep["locks"]), 1)
        self.assertEqual(len(rep["sites"]), 1)
        self.assertEqual(rep["sites"][0]["acq"], 300000)
        rep = report_json(self, "--sort", "contended", MARIADB)
        counts = [s["contended"] for s in rep["sites"]]
        self.assertEqual(counts, sorted(counts, reverse=True))

    def test_hot_site_first_by_name(self):
        path = symbolized_fixture(self.tmp)
        out = self.ok("report", path).stdout
        rows = sites_section(out)
        self.assertIn(HOT_FN, rows[0])
        self.assertIn(COLD_FN, rows[1])
        self.assertRegex(out, r"#1 lock at " + re.escape(HOT_FN) + r" \(symbols_fixture\.cpp:\d+\)")
        self.assertRegex(out, re.escape(HANDLER_FN) + r" \(symbols_fixture\.cpp:\d+\)")
        rows = sites_section(self.ok("report", "--sort", "acq", path).stdout)
        self.assertIn(COLD_FN, rows[0])
        rep = report_json(self, path)
        where = rep["sites"][0]["where"]
        self.assertEqual(where["function"], HOT_FN)
        self.assertRegex(where["source"], r"symbols_fixture\.cpp:\d+$")
        self.assertEqual(where["module"], os.path.join(self.tmp, "bin dir", "symbols_fixture"))
        self.assertEqual([f["function"] for f in rep["sites"][0]["backtrace"]], [HOT_FN, HANDLER_FN])

    def test_percent_encoded_path_with_newline(self):
        """The writer's encoding (%XX for bytes <= 0x20, '%', 0x7f): a directory whose name has a
        newline, a tab and a literal '%41' still names the file addr2line reads."""
        dir_name = "bin\n\tdir %41"
        path = symbolized_fixture(self.tmp, dir_name, percent_encoded)
        with open(path) as fh:
            self.assertIn("%0A%09dir%20%2541/", fh.read())
        rep = report_json(self, path)
        where = rep["sites"][0]["where"]
        self.assertEqual(where["module"], os.path.join(self.tmp, dir_name, "symbols_fixture"))
        self.assertEqual(where["function"], HOT_FN)
        self.assertEqual(rep["processes"][0]["exe"], where["module"])
        out = self.ok("report", path).stdout
        self.assertIn(HOT_FN, out)
        self.assertNotIn("\tdir", out)   # shown escaped in the text, never raw control characters

    def test_counts_only_dump(self):
        """stats=counts: the events, what was not collected, and one line saying the profiler was off."""
        counts = fixture("counts-only.stats")
        out = self.ok("report", counts).stdout
        self.assertRegex(out, r"rwsem_opt_lock\s+812")
        self.assertIn("no per-lock data: the profiler was off (run with LOCKSWAP_STATS=profile / "
                      "lockswap --profile)", out)
        self.assertNotIn("locks: none recorded", out)
        rep = report_json(self, counts)
        self.assertEqual((rep["profiled"], rep["processes"][0]["stats"]), (False, "counts"))
        self.assertEqual(rep["processes"][0]["exe"], "/opt/fixture/bin/counts only")
        self.assertTrue(report_json(self, MARIADB)["profiled"])

    def test_counts_only_real_run_says_not_collected(self):
        """A real counts dump of a program that made 540,000 mutex calls: the calls, lock objects
        and acquisitions were not collected, so the report says so and concludes nothing from them."""
        out = self.ok("report", COUNTS_RWSEM).stdout
        self.assertIn("calls: not collected in the counts-only mode (run with lockswap --profile / "
                      "LOCKSWAP_STATS=profile to collect them)", out)
        self.assertNotIn("no pthread/C11 lock calls", out)
        self.assertNotIn("cannot change", out)
        self.assertNotIn("no calls of", out)
        self.assertNotRegex(out, r"calls: mutex \d")
        self.assertNotRegex(out, r"acquisitions \d|lock objects: \d")
        self.assertIn("lock objects, call sites, acquisitions: not collected in the counts-only mode", out)
        self.assertRegex(out, r"rwsem_wlock_barge\s+241840")
        self.assertIn("the lock events show that locks were taken", out)
        row = process_row(out, COUNTS_PID)
        self.assertEqual(row[-7:-1], ["-"] * 6)      # mutex rwlock cond sem acq contended
        self.assertIn("-: not collected (counts-only dump)", out)

    def test_counts_only_real_run_json(self):
        rep = report_json(self, COUNTS_RWSEM)
        self.assertFalse(rep["profiled"])
        (p,) = rep["processes"]
        self.assertEqual(p["stats"], "counts")
        for key in ("calls", "acq", "contended", "dropped"):
            self.assertIsNone(p[key], key)
            self.assertIsNone(rep["totals"][key], key)
        self.assertEqual(set(p["not_collected"]), {"calls", "acq", "contended", "dropped", "locks", "sites"})
        self.assertEqual(rep["totals"]["not_collected"],
                         {k: [COUNTS_PID] for k in p["not_collected"]})
        for key in ("locks_total", "sites_total", "cond_locks_total", "cond_sites_total",
                    "locks", "sites", "cond_locks", "cond_sites"):
            self.assertIsNone(rep[key], key)
        self.assertEqual(rep["totals"]["events"]["rwsem_wlock_barge"], 241840)

    def test_counts_and_profile_dumps_together(self):
        """One process counted, one profiled: totals come from the processes that collected them,
        named as such, and no conclusion covers the process that did not."""
        out = self.ok("report", "--symbol-budget", "0", COUNTS_RWSEM, PROFILE_RWSEM).stdout
        self.assertIn(f"calls (1 of 2 processes; not collected for pid {COUNTS_PID}, counts-only): "
                      "mutex 540000, rwlock 540000, cond 0, sem 0", out)
        self.assertNotIn("no calls of", out)
        self.assertNotIn("no pthread/C11 lock calls", out)
        self.assertRegex(out, r"lock objects: 2 .*acquisitions 540000, contended \d+ "
                              rf"\(1 of 2 processes; not collected for pid {COUNTS_PID}, counts-only\)")
        self.assertEqual(process_row(out, COUNTS_PID)[-7:-1], ["-"] * 6)
        self.assertEqual(process_row(out, 5839)[-7:-5], ["540000", "540000"])
        rep = report_json(self, "--symbol-budget", "0", COUNTS_RWSEM, PROFILE_RWSEM)
        self.assertTrue(rep["profiled"])
        self.assertEqual(rep["totals"]["calls"], {"mutex": 540000, "rwlock": 540000, "cond": 0, "sem": 0})
        self.assertEqual(rep["totals"]["not_collected"]["calls"], [COUNTS_PID])
        self.assertEqual(rep["locks_total"], 2)

    def test_full_mode_report_unchanged(self):
        """Profiled dumps: the text is what it was, and the JSON too but for the new, empty
        not_collected keys and the null reach (these dumps have no wait records). The dumps are read from a copy in a directory whose path has the
        same length wherever the tests run (the file column is as wide as the longest path)."""
        with tempfile.TemporaryDirectory(prefix="lsfx", dir="/tmp") as copy:
            args = [a if not a.startswith(util.FIXTURES + "/") else shutil.copy(a, copy) for a in FULL_MODE_ARGS]
            self.check_full_mode(args, copy + "/")

    def check_full_mode(self, args, here):
        out = self.ok("report", *args).stdout.replace(here, "@FIXTURES@/")
        with open(FULL_MODE_TEXT) as fh:
            self.assertEqual(out, fh.read())
        rep = json.loads(self.ok("report", "--json", *args).stdout.replace(here, "@FIXTURES@/"))
        self.assertIsNone(rep.pop("reach"))   # dumps without wait records: no reach model (reach_test.py)
        self.assertEqual(rep.pop("lwlocks"), [])   # no PostgreSQL LWLock records in these dumps
        self.assertEqual(rep.pop("wtlocks"), [])   # nor counts-mode WiredTiger rwlock records
        self.assertEqual(rep["totals"].pop("not_collected"), {})
        for p in rep["processes"]:
            self.assertEqual(p.pop("not_collected"), [])
        with open(FULL_MODE_JSON) as fh:
            self.assertEqual(rep, json.load(fh))

    def test_lwlock_tranches_summed_over_processes(self):
        """LOCKSWAP_LWLOCK: each process's lwlock records are summed per tranche and variant,
        the most waiting first; the share counts waits over every attempt."""
        def dump(pid, rows):
            lines = [f"lockswap-v1 begin pid={pid} seq=1 start_ns={pid} now_ns=9 mutex=glibc rwlock=glibc "
                     "sem=glibc cid=rseq wtlock=off lwlock=rwsem stats=counts exe=postgres"]
            lines += [f"lockswap-v1 lwlock id={i} tranche={name} variant={v} acq={acq} missed={missed} waits={w} "
                      f"wait_ns={ns} hold_samples=1 hold_ns=100" for i, name, v, acq, missed, w, ns in rows]
            lines.append(f"lockswap-v1 end pid={pid} seq=1")
            path = os.path.join(self.tmp, f"pg.{pid}")
            with open(path, "w") as fh:
                fh.write("\n".join(lines) + "\n")
            return path
        a = dump(11, [(4, "ProcArray", "rwsem", 1000, 0, 10, 5000), (8, "WALWrite", "rwsem", 10, 30, 40, 900000)])
        b = dump(12, [(4, "ProcArray", "rwsem", 3000, 0, 30, 15000)])
        rep = json.loads(self.ok("report", "--json", a, b).stdout)
        self.assertEqual([(r["tranche"], r["acq"], r["waits"], r["wait_ns"]) for r in rep["lwlocks"]],
                         [("WALWrite", 10, 40, 900000), ("ProcArray", 4000, 40, 20000)])
        text = self.ok("report", a, b).stdout
        self.assertIn("PostgreSQL LWLock tranches", text)
        self.assertRegex(text, r"WALWrite +rwsem +10 +40 +100\.00%")   # 40 waits over 10 + 30 attempts
        self.assertRegex(text, r"ProcArray +rwsem +4000 +40 +1\.00%")

    def test_wtlock_counts_records(self):
        """LOCKSWAP_WTLOCK in the counts mode: wtlock records are a section of their own (kind
        wtlock), the most waiting first; the dump stays a counts-only one."""
        path = os.path.join(self.tmp, "wt.1")
        with open(path, "w") as fh:
            fh.write("lockswap-v1 begin pid=1 seq=1 start_ns=1 now_ns=9 mutex=glibc rwlock=glibc sem=glibc "
                     "cid=rseq wtlock=rwsem stats=counts exe=mongod\n"
                     "lockswap-v1 wtlock addr=0x10 kind=wtlock variant=rwsem acq=5 rd_acq=5 contended=0 "
                     "rd_contended=0 wait_ns=0 wait_max_ns=0 hold_samples=0 hold_ns=0\n"
                     "lockswap-v1 wtlock addr=0x20 kind=wtlock variant=rwsem first_ip=0x1234 acq=128 rd_acq=0 "
                     "contended=2 rd_contended=0 wait_ns=3000 wait_max_ns=2000 hold_samples=2 hold_ns=400\n"
                     "lockswap-v1 end pid=1 seq=1\n")
        rep = json.loads(self.ok("report", "--json", path).stdout)
        self.assertFalse(rep["profiled"])
        self.assertIsNone(rep["locks"])
        self.assertEqual([(r["addr"], r["kind"], r["acq"], r["contended"], r["wait_ns"]) for r in rep["wtlocks"]],
                         [(0x20, "wtlock", 128, 2, 3000), (0x10, "wtlock", 5, 0, 0)])
        text = self.ok("report", path).stdout
        self.assertIn("WiredTiger rwlocks", text)
        self.assertRegex(text, r"0x20 +wtlock +rwsem +1 +128 +0 +2 +1\.56% +3us +1\.5us +2us +200ns")

    def test_malformed_records_warn_and_continue(self):
        path = os.path.join(self.tmp, "bad.stats")
        with open(MARIADB) as src, open(path, "w") as dst:
            for line in src:
                dst.write(line)
                if line.startswith("lockswap-v1 lock id=2 "):
                    dst.write("lockswap-v1 lock id=7 addr=0x7 kind=mutex acq=-5\n")
                    dst.write("lockswap-v1 lock id=8 addr=0x8 kind=mutex acq=" + "9" * 30 + "\n")
        with open(path, "ab") as dst:
            dst.write(b"\x00\xff binary garbage lockswap-v1 site ip=0xzz\n")
        p = self.ok("report", "--json", path, os.path.join(self.tmp, "missing.stats"))
        rep = json.loads(p.stdout)
        self.assertEqual(by_addr(rep["locks"], HOT_MUTEX)["acq"], 400000)
        self.assertNotIn(0x7, [s["addr"] for s in rep["locks"]])
        self.assertNotIn(0x8, [s["addr"] for s in rep["locks"]])
        with open(path, errors="replace") as fh:
            line = next(i for i, l in enumerate(fh, 1) if "acq=-5" in l)
        self.assertIn(f"{path}:{line}: lock record skipped: acq=-5 is not a number", p.stderr)
        self.assertIn(f"{path}:{line + 1}: lock record skipped", p.stderr)
        self.assertIn("missing.stats: No such file or directory", p.stderr)
        self.assertNotIn("Traceback", p.stderr)

    def test_png(self):
        png = os.path.join(self.tmp, "waits.png")
        p = self.ok("report", "--png", png, MARIADB, *POSTGRES)
        self.assert_png(png, p.stderr)

    def test_no_statistics_is_an_error(self):
        path = os.path.join(self.tmp, "empty.log")
        with open(path, "w") as fh:
            fh.write("lockswap: pid 1 mutex=glibc rwlock=glibc sem=glibc cid=rseq\nhello\n")
        p = util.run_cli("report", path)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("no lockswap-v1 statistics", p.stderr)
        p = util.run_cli("report", os.path.join(self.tmp, "missing"))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("missing", p.stderr)


if __name__ == "__main__":
    util.main(extra=("SYMBOLS_FIXTURE",))
