#!/usr/bin/python3
"""tests/tools/report_fuzz_test.py LOCKSWAP LOCKSWAP_CLI SYMBOLS_FIXTURE — `lockswap report`
against malformed input: mutated copies of the fixture dumps (byte flips, truncations, duplicated
and huge numbers, random records, binary garbage, huge lines) and dumps whose mappings name
malformed ELF files (empty, truncated, a header promising more than the file holds, a directory).

Deterministic: a fixed seed and a fixed number of cases. Most cases call the report in-process
(the LOCKSWAP_CLI package imported, stdout a strict UTF-8 stream like a real pipe) so a few
hundred fit in seconds; a sample also runs through the real command. Every case must end with
exit status 0 or 1, print no traceback and no "internal error", and finish in bounded time.
Give LOCKSWAP_CLI of an older tree to see what this finds there."""
import contextlib
import importlib
import io
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = [os.path.join(HERE, "fixtures", n) for n in
            ("mariadbd-4711.stats", "postgres-201.stats", "postgres-202.stats")]
SEED = 20260
CASES_PER_MUTATOR = 120
CASE_LIMIT_S = 10.0          # one report, however bad its input
CLI = CLI_PY = SYMBOLS = None

RECORD_TYPES = ("begin", "end", "calls", "event", "lock", "site", "map", "dropped", "bogus")
KEYS = ("pid", "seq", "start_ns", "now_ns", "exe", "stats", "family", "calls", "name", "count", "id",
        "addr", "kind", "acq", "contended", "rd_acq", "rd_contended", "wait_ns", "wait_max_ns",
        "wait_hist", "hold_ns", "hold_max_ns", "hold_hist", "lock", "ip", "op", "bt", "start", "end",
        "offset", "path", "locks", "sites")
NASTY_NUMBERS = ("-1", "0x", "0xZZ", "1e9", "18446744073709551616", "9" * 400, "9" * 5000,
                 "-" + "9" * 300, "0x" + "f" * 300, "", "%", "%0", "%zz", "1;2:3", ":", ";;", "48:1",
                 "-3:5", "0:-7", "1:" + "9" * 350, "0:1;" * 2000)


def load_cli(path):
    """The package at PATH (a lockswap_cli directory; its parent is on PYTHONPATH,
    tests/tools/CMakeLists.txt), imported as itself."""
    main = importlib.import_module(os.path.basename(path.rstrip("/")) + ".main")
    found = os.path.dirname(os.path.realpath(main.__file__))
    if found != os.path.realpath(path):
        sys.exit(f"report_fuzz_test: imported {found}, not {path}: put {os.path.dirname(path)} on PYTHONPATH")
    return main


def strict_stream():
    """A text stream that fails on what a real UTF-8 pipe fails on (lone surrogates)."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")


# --------------------------------------------------------------------------
# Mutators: bytes -> bytes
# --------------------------------------------------------------------------

def flip_bytes(rng, data):
    buf = bytearray(data)
    for _ in range(rng.randint(1, 20)):
        i = rng.randrange(len(buf))
        buf[i] = rng.choice((buf[i] ^ (1 << rng.randrange(8)), 0, 0x0a, 0x20, 0x25, 0xff, ord("=")))
    return bytes(buf)


def truncate(rng, data):
    return data[:rng.randrange(len(data))]


def nasty_numbers(rng, data):
    words = data.split(b" ")
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(words))
        key, eq, _ = words[i].partition(b"=")
        if eq:
            words[i] = key + b"=" + rng.choice(NASTY_NUMBERS).encode()
    return b" ".join(words)


def duplicate_lines(rng, data):
    lines = data.split(b"\n")
    for _ in range(rng.randint(1, 10)):
        i = rng.randrange(len(lines))
        lines.insert(rng.randrange(len(lines) + 1), lines[i])
    return b"\n".join(lines)


def random_records(rng, data):
    lines = data.split(b"\n")
    for _ in range(rng.randint(1, 15)):
        fields = [f"{rng.choice(KEYS)}={rng.choice(NASTY_NUMBERS + ('0', '1', '0x10', 'mutex', 'a%0Ab'))}"
                  for _ in range(rng.randint(0, 8))]
        rec = " ".join(["lockswap-v1", rng.choice(RECORD_TYPES)] + fields).encode()
        lines.insert(rng.randrange(len(lines) + 1), rec)
    return b"\n".join(lines)


def garbage(rng, data):
    junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3000)))
    at = rng.randrange(len(data) + 1)
    return data[:at] + junk + data[at:]


def huge_line(rng, data):
    at = data.find(b"\n", rng.randrange(len(data))) + 1
    filler = rng.choice((b"x", b"lockswap-v1 ", b"k=1 ", b"wait_hist=1:1;", b"bt=0x1,"))
    return data[:at] + filler * (2_000_000 // len(filler)) + b"\n" + data[at:]


MUTATORS = (flip_bytes, truncate, nasty_numbers, duplicate_lines, random_records, garbage, huge_line)


# --------------------------------------------------------------------------
# Malformed ELF files named by a dump's mappings
# --------------------------------------------------------------------------

def elf_header(phoff, phentsize, phnum, is64=True):
    ident = b"\x7fELF" + bytes((2 if is64 else 1, 1, 1)) + bytes(9)
    if is64:
        return ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, phoff, 0, 0, 64, phentsize, phnum, 0, 0, 0)
    return ident + struct.pack("<HHIIIIIHHHHHH", 3, 3, 1, 0, phoff, 0, 0, 52, phentsize, phnum, 0, 0, 0)


def bad_elves(tmp):
    """name -> path of files that are not usable ELF files, each its own way."""
    with open(SYMBOLS, "rb") as fh:
        good = fh.read()
    files = {
        "empty": b"",
        "magic-only": b"\x7fELF",
        "text": b"#!/bin/sh\necho not elf\n" * 10,
        "phnum-huge": elf_header(64, 56, 0xffff),
        "phoff-past-end": elf_header(1 << 40, 56, 4),
        "phentsize-zero": elf_header(64, 0, 4),
        "phentsize-small": elf_header(64, 8, 4) + bytes(32),
        "elf32-truncated": elf_header(52, 32, 3, is64=False) + bytes(10),
        "segments-garbage": elf_header(64, 56, 3) + bytes(random.Random(1).randrange(256) for _ in range(168)),
        "good-truncated-200": good[:200],
        "good-truncated-half": good[:len(good) // 2],
        "good-no-sections": good[:4096] if len(good) > 4096 else good,
    }
    out = {}
    for name, data in files.items():
        out[name] = os.path.join(tmp, f"elf {name}")
        with open(out[name], "wb") as fh:
            fh.write(data)
    out["directory"] = os.path.join(tmp, "elf dir")
    os.mkdir(out["directory"])
    out["missing"] = os.path.join(tmp, "elf missing")
    return out


def elf_dump(path):
    enc = "".join(c if c > " " and c not in "%\x7f" else f"%{ord(c):02X}" for c in path)
    return (f"lockswap-v1 begin pid=77 seq=1 start_ns=1 now_ns=2 mutex=futex rwlock=futex sem=glibc cid=rseq "
            f"exe={enc}\n"
            "lockswap-v1 calls family=mutex calls=10\n"
            "lockswap-v1 lock id=1 addr=0x1000 kind=mutex acq=10 contended=2 wait_ns=100 wait_max_ns=60 "
            "wait_hist=5:2 hold_ns=50 hold_max_ns=9 hold_hist=3:10\n"
            "lockswap-v1 site id=1 lock=1 ip=0x400123 op=lock acq=10 contended=2 wait_ns=100 wait_max_ns=60 "
            "wait_hist=5:2 hold_ns=50 hold_max_ns=9 hold_hist=3:10 bt=0x400123,0x400456\n"
            f"lockswap-v1 map start=0x400000 end=0x500000 offset=0x0 path={enc}\n"
            "lockswap-v1 end pid=77 seq=1\n").encode()


# --------------------------------------------------------------------------

class ReportFuzzTest(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.cli = load_cli(CLI_PY)
        cls._tmp = tempfile.TemporaryDirectory(prefix="lockswap-fuzz-")
        cls.tmp = cls._tmp.name
        cls.seeds = []
        for path in FIXTURES:
            with open(path, "rb") as fh:
                cls.seeds.append(fh.read())

    def setUp(self):
        self.failures = []

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def report_in_process(self, path, *extra):
        """(exit status, stdout, stderr, seconds) of `lockswap report` in this process."""
        out, err = strict_stream(), io.StringIO()
        start = time.monotonic()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    rc = self.cli.main(["report", *extra, path])
                    out.flush()
                except SystemExit as e:
                    rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                    if not isinstance(e.code, int) and e.code is not None:
                        err.write(str(e.code))
        except Exception as e:   # what the real command would show as a traceback
            import traceback
            return "traceback", "", "".join(traceback.format_exception(e)), time.monotonic() - start
        return rc, "", err.getvalue(), time.monotonic() - start

    def check(self, label, rc, err, secs):
        problems = []
        if rc not in (0, 1):
            problems.append(f"exit status {rc}")
        if "Traceback" in err or "internal error" in err:
            problems.append("traceback")
        if secs > CASE_LIMIT_S:
            problems.append(f"took {secs:.1f}s")
        if problems:
            self.failures.append(f"{label}: {', '.join(problems)}\n{err[-1500:]}")

    def write_case(self, name, data):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as fh:
            fh.write(data)
        return path

    def test_mutated_dumps(self):
        rng = random.Random(SEED)
        for mutator in MUTATORS:
            for i in range(CASES_PER_MUTATOR if mutator is not huge_line else 4):
                data = mutator(rng, rng.choice(self.seeds))
                path = self.write_case(f"{mutator.__name__}-{i}.stats", data)
                rc, _, err, secs = self.report_in_process(path, *rng.choice(((), ("--json",), ("--top", "0"))))
                self.check(f"{mutator.__name__} case {i} (seed {SEED})", rc, err, secs)
                os.unlink(path)
        self.assertEqual([], self.failures[:10], f"{len(self.failures)} failing cases")

    def test_malformed_elf_in_mappings(self):
        for name, elf in bad_elves(self.tmp).items():
            path = self.write_case(f"elf-{name}.stats", elf_dump(elf))
            for extra in ((), ("--json",)):
                rc, _, err, secs = self.report_in_process(path, *extra)
                self.check(f"ELF '{name}' {extra}", rc, err, secs)
                if rc == 0 and name != "missing" and os.path.basename(elf) not in err:
                    self.failures.append(f"ELF '{name}' {extra}: no warning naming the skipped file")
        self.assertEqual([], self.failures)

    def test_real_command_sample(self):
        """A few cases end to end through the wrapper and a fresh interpreter."""
        rng = random.Random(SEED + 1)
        for i in range(6):
            mutator = MUTATORS[i % len(MUTATORS)]
            if mutator is huge_line:
                mutator = garbage
            path = self.write_case(f"real-{i}.stats", mutator(rng, rng.choice(self.seeds)))
            start = time.monotonic()
            p = subprocess.run([CLI, "report", path], capture_output=True, text=True, timeout=60,
                               errors="replace")
            self.check(f"real command case {i} ({mutator.__name__})", p.returncode, p.stderr,
                       time.monotonic() - start)
        self.assertEqual([], self.failures)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(f"usage: {sys.argv[0]} path/to/lockswap path/to/lockswap_cli SYMBOLS_FIXTURE [unittest args]")
    CLI, CLI_PY, SYMBOLS = (os.path.abspath(a) for a in sys.argv[1:4])
    del sys.argv[1:4]
    unittest.main(verbosity=2)
