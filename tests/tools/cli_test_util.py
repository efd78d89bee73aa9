"""tests/tools/cli_test_util.py — shared by report_test.py and compare_test.py.

Both take the path of the configured `lockswap` script as their first argument
(ctest passes ${CMAKE_BINARY_DIR}/bin/lockswap), the rest goes to unittest.
"""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
CLI = None
EXTRA_ARGS = []


def fixture(name):
    return os.path.join(FIXTURES, name)


def run_cli(*args, env=None, timeout=60):
    """`lockswap ARGS...` -> CompletedProcess with text stdout and stderr."""
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def elf_symbol(path, name):
    """The value of symbol NAME (demangled) in the ELF file PATH, from nm."""
    out = subprocess.run(["nm", "-C", path], capture_output=True, text=True, check=True).stdout
    return next(int(l.split()[0], 16) for l in out.splitlines() if l.endswith(" " + name))


def exec_segment(path):
    """(p_offset, p_vaddr, p_memsz) of the executable PT_LOAD segment, from readelf."""
    out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f[:1] == ["LOAD"] and "E" in f[6:-1]:
            return int(f[1], 16), int(f[2], 16), int(f[5], 16)
    raise AssertionError(f"no executable LOAD segment in {path}")


def have_matplotlib():
    return subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                          capture_output=True).returncode == 0


class CliTestCase(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="lockswap-cli-")
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def ok(self, *args, **kw):
        p = run_cli(*args, **kw)
        self.assertEqual(p.returncode, 0, f"lockswap {' '.join(args)}:\n{p.stdout}\n{p.stderr}")
        return p

    def assert_png(self, path, stderr):
        if have_matplotlib():
            with open(path, "rb") as fh:
                self.assertEqual(fh.read(8), b"\x89PNG\r\n\x1a\n")
        else:
            self.assertIn("skipped", stderr)


def main(extra=()):
    """unittest.main after taking the CLI path (and EXTRA positional paths) off argv."""
    global CLI, EXTRA_ARGS
    if len(sys.argv) < 2 + len(extra):
        sys.exit(f"usage: {sys.argv[0]} path/to/lockswap {' '.join(extra)} [unittest args]")
    CLI = os.path.abspath(sys.argv[1])
    EXTRA_ARGS = [os.path.abspath(a) for a in sys.argv[2:2 + len(extra)]]
    del sys.argv[1:2 + len(extra)]
    unittest.main(verbosity=2)
