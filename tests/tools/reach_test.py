#!/usr/bin/python3
"""tests/tools/reach_test.py LOCKSWAP REACH_SYMBOLS — the reach model (tools/lockswap_cli/reach.py,
docs/reach.md) through `lockswap report` and `lockswap compare`, on hand-written counts-mode dumps
(fixtures/reach-*): a MariaDB-like process (its own futex locks dominate), a PostgreSQL-like pair
(semaphore waits, and a spin delay recognised by the frames of its sleep, which point into
REACH_SYMBOLS, reach_symbols.c built with debug info), a glibc column, and the library's dump
merged with `lockswap attribute`'s eBPF and probe records (loose, and in a block of their own)."""
import csv
import json
import os
import re
import shutil

import cli_test_util as util
from cli_test_util import CliTestCase, elf_symbol, exec_segment, fixture

MARIADB = fixture("reach-mariadb.stats")
GLIBC = fixture("reach-glibc.stats")
EBPF_LIB = fixture("reach-ebpf-lib.stats")
EBPF_LOOSE = fixture("reach-ebpf.records")
EBPF_BLOCK = fixture("reach-ebpf-block.stats")
OLD_DUMP = fixture("mariadbd-4711.stats")     # a library before wait accounting: no reach
NOT_SEEN = "not seen without `lockswap attribute` (root, eBPF)"
REACH_KEYS = {"processes", "column", "ebpf", "lock_wait_ns", "swapped_ns", "classes", "reach_pct",
              "reach_algorithm_pct", "reach_why", "warning", "glibc_lock_pct", "futex_sites",
              "futex_sites_total", "spin_delay_sites", "cond_sites", "cond_sites_total", "probes",
              "probes_total", "apart", "idle_sites", "other_sleep_sites", "dropped_waits", "ebpf_dropped", "ebpf_ignored_kinds"}
CLASS_KEYS = {"class", "label", "swapped", "seen", "ns", "n", "share", "note"}
SITE_KEYS = {"site", "kind", "src", "module", "offset", "calls", "n", "ns", "max_ns", "share", "pids"}
CLASSES = ["algorithm", "sleep_primitive", "lockswap_internal", "own_futex", "spin_delay", "glibc_internal",
           "glibc_lock"]


def reach_of(test, *files):
    return json.loads(test.ok("report", "--json", *files).stdout)["reach"]


def shares(r):
    return {c["class"]: (None if c["share"] is None else round(c["share"], 6)) for c in r["classes"]}


class ReachTest(CliTestCase):
    def postgres(self):
        """fixtures/reach-postgres.stats.in with its addresses inside a copy of REACH_SYMBOLS."""
        exe = shutil.copy(util.EXTRA_ARGS[0], os.path.join(self.tmp, "postgres"))
        base = 0x5600_0000_0000
        p_offset, p_vaddr, p_memsz = exec_segment(exe)
        ret = lambda name: base + elf_symbol(exe, name) + 5   # a return address inside the function
        values = {"EXE": exe, "MAP_START": base + p_vaddr, "MAP_END": base + p_vaddr + p_memsz,
                  "MAP_OFFSET": p_offset, "PG_USLEEP": ret("pg_usleep"), "S_LOCK": ret("s_lock"),
                  "PERFORM_SPIN_DELAY": ret("perform_spin_delay"), "VACUUM": ret("vacuum_delay_point"),
                  "IDLE": ret("WaitEventSetWait")}
        with open(fixture("reach-postgres.stats.in")) as fh:
            text = fh.read()
        for k, v in values.items():
            text = text.replace(f"@{k}@", v if isinstance(v, str) else hex(v))
        path = os.path.join(self.tmp, "postgres.stats")
        with open(path, "w") as fh:
            fh.write(text)
        return path

    def test_mariadb_like(self):
        """mutex waits 15%, the program's own futex locks 80%: reach 15%, warned; idle and cond apart."""
        r = reach_of(self, MARIADB)
        self.assertEqual(r["lock_wait_ns"], 10_000_000_000)    # the unknown kind and record are ignored
        self.assertEqual(shares(r), {"algorithm": 15.0, "sleep_primitive": 0.0, "lockswap_internal": 5.0,
                                     "own_futex": 80.0, "spin_delay": 0.0, "glibc_internal": None,
                                     "glibc_lock": None})
        self.assertEqual((r["reach_pct"], r["reach_algorithm_pct"], r["column"]), (15.0, 15.0, "native"))
        self.assertEqual(r["warning"], "this comparison can move at most 15% of the waiting (15% by algorithm)")
        self.assertEqual([c["note"] for c in r["classes"] if not c["seen"]], [NOT_SEEN] * 2)
        self.assertEqual(r["futex_sites_total"], 6)
        self.assertEqual([s["ns"] for s in r["futex_sites"]], [3e9, 2e9, 1.5e9, 8e8, 4e8])
        self.assertEqual((r["futex_sites"][0]["site"], r["futex_sites"][0]["share"]), ("mariadbd+0x411000", 30.0))
        self.assertEqual({k: v["ns"] for k, v in r["apart"].items()},
                         {"cond": 30_000_000_000, "idle": 125_000_000_000, "sleep": 2_000_000_000})
        self.assertEqual([s["calls"] for s in r["cond_sites"]], [["pthread_cond_timedwait"], ["pthread_cond_wait"]])
        self.assertFalse(r["ebpf"])
        out = self.ok("report", MARIADB).stdout
        self.assertTrue(out.startswith("reach ("), out[:200])   # the first section
        self.assertLess(out.index("reach ("), out.index("lockswap report:"))
        self.assertIn("  WARNING: this comparison can move at most 15% of the waiting (15% by algorithm)", out)
        self.assertIn("reach: 15% of the lock waiting is swapped (15% by algorithm)", out)
        self.assertRegex(out, r"glibc internal +- +- +- +no +" + re.escape(NOT_SEEN))
        self.assertIn("a condvar may be a lock's sleep, e.g. WiredTiger's rwlocks", out)
        self.assertIn("apart from lock waiting (not in the total): condition waits 30s (9000), idle waits 125s "
                      "(1010), other timed sleeps 2s (200)", out)

    def test_postgres_like(self):
        """Semaphore waits (LWLocks) are the swapped sleep primitive; select under s_lock is a spin
        delay, the same select under vacuum_delay_point a plain sleep; two processes summed."""
        path = self.postgres()
        r = reach_of(self, path)
        self.assertEqual(r["processes"], 2)
        self.assertEqual(r["lock_wait_ns"], 8_000_000_000)
        self.assertEqual(shares(r), {"algorithm": 5.0, "sleep_primitive": 75.0, "lockswap_internal": 0.0,
                                     "own_futex": 0.0, "spin_delay": 20.0, "glibc_internal": None,
                                     "glibc_lock": None})
        self.assertEqual((r["reach_pct"], r["reach_algorithm_pct"], r["warning"]), (80.0, 5.0, None))
        (spin,) = r["spin_delay_sites"]
        self.assertEqual((spin["recognised"], spin["ns"], spin["n"], spin["pids"]),
                         ("perform_spin_delay", 1_600_000_000, 1600, [5201, 5202]))
        self.assertTrue(spin["site"].startswith("pg_usleep"), spin["site"])
        self.assertEqual(r["apart"]["sleep"], {"ns": 1_000_000_000, "n": 1000})
        self.assertEqual(r["apart"]["idle"]["ns"], 50_000_000_000)
        self.assertTrue(r["idle_sites"][0]["site"].startswith("WaitEventSetWait"), r["idle_sites"])
        self.assertEqual(r["dropped_waits"], 3)
        out = self.ok("report", path).stdout
        self.assertIn("reach: 80% of the lock waiting is swapped (5.0% by algorithm)", out)
        self.assertNotIn("WARNING", out)
        self.assertIn("<perform_spin_delay>", out)
        self.assertIn("3 waits found no room in the library's wait-site table", out)

    def test_glibc_column(self):
        """All glibc: lockswap swaps nothing and glibc's waits are invisible: reach is n/a, no warning."""
        r = reach_of(self, GLIBC)
        self.assertEqual((r["column"], r["reach_pct"], r["reach_algorithm_pct"], r["reach_why"], r["warning"]),
                         ("glibc", None, None, "n/a (glibc column)", None))
        self.assertEqual([c["class"] for c in r["classes"] if not c["seen"]],
                         ["algorithm", "sleep_primitive", "glibc_internal", "glibc_lock"])
        self.assertEqual(r["futex_sites"][0]["ns"], 1_000_000_000)
        out = self.ok("report", GLIBC).stdout
        self.assertIn("  reach: n/a (glibc column)", out)
        self.assertNotIn("WARNING", out)

    def check_ebpf(self, r, spin_site):
        self.assertTrue(r["ebpf"])
        self.assertEqual(r["processes"], 1)
        self.assertEqual(r["lock_wait_ns"], 10_000_000_000)   # eBPF's kind=lockswap not counted twice
        self.assertEqual(shares(r), {"algorithm": 10.0, "sleep_primitive": 40.0, "lockswap_internal": 0.0,
                                     "own_futex": 0.0, "spin_delay": 20.0, "glibc_internal": 20.0,
                                     "glibc_lock": 10.0})
        self.assertEqual((r["reach_pct"], r["reach_algorithm_pct"], r["warning"]), (50.0, 10.0, None))
        self.assertEqual(r["ebpf_ignored_kinds"], ["lockswap"])
        self.assertEqual([(s["site"], s["recognised"]) for s in r["spin_delay_sites"]], [spin_site])
        self.assertEqual([(p["app"], p["kind"], p["name"], p["ns"]) for p in r["probes"]],
                         [("postgres", "lwlock", "BufferMapping", 3e9), ("postgres", "lwlock", "WALInsert", 1e9),
                          ("postgres", "heavyweight", "ExclusiveLock", 5e8)])
        self.assertTrue(all(c["seen"] for c in r["classes"]))

    def test_ebpf_loose_records(self):
        """lockswap attribute's records (pid=, site=MODULE+0xOFF:FUNCTION, stack=...): the spin delay
        is told by a function of its stack."""
        self.check_ebpf(reach_of(self, EBPF_LIB, EBPF_LOOSE), ("postgres+0x5a0:pg_usleep", "perform_spin_delay"))

    def test_ebpf_block_kept_beside_the_library_dump(self):
        """An eBPF block with the process's pid and start time does not replace the library's dump."""
        rep = json.loads(self.ok("report", "--json", EBPF_LIB, EBPF_BLOCK).stdout)
        self.check_ebpf(rep["reach"], ("s_lock+0x40", "s_lock"))   # a site named SYMBOL+0xOFF
        self.assertEqual([p["pid"] for p in rep["processes"]], [7300])
        self.assertEqual(rep["processes"][0]["stats"], "counts")
        out = self.ok("report", EBPF_BLOCK, EBPF_LIB).stdout     # either order
        self.assertIn("reach: 50% of the lock waiting is swapped (10% by algorithm)", out)
        self.assertIn("application probes (top 3 of 3", out)

    def test_ebpf_records_alone(self):
        """lockswap attribute's file without the library's dumps: the reach of what eBPF saw
        (its kind=lockswap sleeps are the swapped share, the family not told)."""
        out = self.ok("report", EBPF_LOOSE).stdout
        self.assertIn("reach: 50% of the lock waiting is swapped (0% by algorithm)", out)
        self.assertIn("no dump of the library (only lockswap attribute's eBPF records)", out)
        r = reach_of(self, EBPF_LOOSE)
        self.assertEqual(shares(r)["lockswap_ebpf"], 50.0)

    def test_ebpf_dropped_events_are_said(self):
        """lockswap attribute's dropped record (events its buffers lost, waits its maps had no room
        for) says the eBPF classes undercount; none dropped, nothing said."""
        self.assertNotIn("eBPF attribution dropped", self.ok("report", EBPF_LOOSE).stdout)
        lossy = os.path.join(self.tmp, "lossy.records")
        with open(EBPF_LOOSE) as src, open(lossy, "w") as dst:
            dst.write(src.read().replace("dropped src=ebpf lost=0 waits=0", "dropped src=ebpf lost=3 waits=2"))
        out = self.ok("report", lossy).stdout
        self.assertIn("eBPF attribution dropped events (lost=3, waits=2: lost by the kernel's buffers, or no "
                      "room in its maps): its classes undercount", out)
        self.assertEqual(reach_of(self, lossy)["ebpf_dropped"], {"lost": 3, "waits": 2})

    def test_json_shape(self):
        rep = json.loads(self.ok("report", "--json", MARIADB).stdout)
        self.assertEqual(list(rep)[:2], ["schema", "reach"])
        r = rep["reach"]
        self.assertEqual(set(r), REACH_KEYS)
        self.assertEqual([c["class"] for c in r["classes"]], CLASSES)
        for c in r["classes"]:
            self.assertEqual(set(c), CLASS_KEYS)
        for s in r["futex_sites"] + r["idle_sites"] + r["other_sleep_sites"]:
            self.assertEqual(set(s), SITE_KEYS)
        for s in r["cond_sites"]:
            self.assertEqual(set(s), SITE_KEYS | {"lock_sleep"})
        self.assertEqual(set(r["apart"]), {"cond", "idle", "sleep"})

    def test_no_wait_data_no_reach(self):
        """A dump from a library before wait accounting: reach null, no section (the report as before)."""
        rep = json.loads(self.ok("report", "--json", OLD_DUMP).stdout)
        self.assertIsNone(rep["reach"])
        self.assertNotIn("reach (", self.ok("report", OLD_DUMP).stdout)

    def test_compare_recognises_spin_delays(self):
        """compare symbolises only what decides a class, and still tells the spin delay (a table
        cell: the algorithm's share in parentheses where it differs)."""
        script = ('f=${LOCKSWAP_STATS_FILE:-}; if [ -n "$f" ]; then f=$(printf %s "$f" | sed "s/%p/$$/");'
                  ' cat "$1" >> "$f"; fi; echo ops=100')
        p = self.ok("compare", "--variants", "futex", "--no-glibc", "--repeat", "1", "--stats", "--stats-dir",
                    os.path.join(self.tmp, "stats"), "--probe", os.path.join(self.tmp, "no-probe"),
                    "--metric", r"ops=(\d+)", "--", "sh", "-c", script, "sh", self.postgres(), timeout=120)
        row = next(l for l in p.stdout.splitlines() if l.split()[:1] == ["futex"])
        self.assertTrue(row.endswith("80% (5.0% alg.)"), row)
        self.assertNotIn("WARNING", p.stdout)

    def test_compare_reach_column(self):
        """compare --stats: a reach column from each row's counts-only dumps (here the command appends
        a fixture dump to its own statistics file), and the warning under the table."""
        script = ('f=${LOCKSWAP_STATS_FILE:-}; if [ -n "$f" ]; then f=$(printf %s "$f" | sed "s/%p/$$/");'
                  ' case "${LOCKSWAP_MUTEX:-}" in rwsem) cat "$1";; *) cat "$2";; esac >> "$f"; fi; echo ops=100')
        csv_path = os.path.join(self.tmp, "runs.csv")
        p = self.ok("compare", "--variants", "rwsem", "--repeat", "1", "--stats", "--csv", csv_path, "--stats-dir",
                    os.path.join(self.tmp, "stats"), "--probe", os.path.join(self.tmp, "no-probe"),
                    "--metric", r"ops=(\d+)", "--", "sh", "-c", script, "sh", MARIADB, GLIBC, timeout=120)
        lines = p.stdout.splitlines()
        head = next(l for l in lines if l.split()[:1] == ["variant"])
        self.assertEqual(head.split()[-1], "reach")
        row = lambda v: next(l for l in lines if l.split()[:1] == [v]).split()
        self.assertEqual(row("none")[-1], "-")
        self.assertEqual(row("glibc")[-1], "n/a")
        self.assertEqual(row("rwsem")[-1], "15%")
        self.assertIn("  WARNING rwsem: this comparison can move at most 15% of the waiting (15% by algorithm)",
                      lines)
        self.assertIn("  n/a: a glibc column; its waits are glibc's, invisible unprivileged", lines)
        with open(csv_path) as fh:
            summary = {r["variant"]: r for r in csv.DictReader(fh) if r["record"] == "summary"}
        self.assertEqual({v: (r["reach_pct"], r["reach_algorithm_pct"]) for v, r in summary.items()},
                         {"none": ("", ""), "glibc": ("", ""), "rwsem": ("15.0", "15.0")})   # n/a: empty


if __name__ == "__main__":
    util.main(extra=("REACH_SYMBOLS",))
