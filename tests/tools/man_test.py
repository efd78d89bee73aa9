#!/usr/bin/env python3
"""tests/tools/man_test.py — the manual pages against the library.

    man_test.py BUILD_DIR LIBLOCKSWAP

- Every setting the library accepts is documented in liblockswap(7)'s
  SETTINGS section: the names the library lists (LOCKSWAP_LIST=1) and every
  LOCKSWAP_* name compiled into it as a string of its own (the names it
  reads or accepts, preload/config/config.cpp) that it accepts when set.
- Every name documented there, and every LOCKSWAP_* name any page mentions,
  is one the library accepts (an unknown name stops a program before main
  with "unknown lockswap variable").
- `lockswap help TOPIC` shows each page, and prints the page's source when
  man fails.
"""

import os
import re
import subprocess
import sys
import tempfile
import unittest

BUILD, LIB = sys.argv[1], sys.argv[2]
MAN = os.path.join(BUILD, "share", "man")
PAGE7 = os.path.join(MAN, "man7", "liblockswap.7")
PAGES1 = [os.path.join(MAN, "man1", p) for p in
          ("lockswap.1", "lockswap-compare.1", "lockswap-report.1", "lockswap-doctor.1")]
WRAPPER = os.path.join(BUILD, "bin", "lockswap")
NAME = re.compile(rb"(?<!D)LOCKSWAP_[A-Z0-9_]*[A-Z0-9]")   # not -DLOCKSWAP_...: CMake options
TRUE = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"
UNKNOWN = "unknown lockswap variable"


def run_lib(env_extra, cwd):
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": LIB}
    env.update(env_extra)
    return subprocess.run([TRUE], env=env, cwd=cwd, capture_output=True, text=True, timeout=30)


def documented_settings():
    """The names of SETTINGS' .TP entries (up to the next .SH)."""
    text = open(PAGE7, encoding="utf-8").read()
    m = re.search(r"^\.SH SETTINGS\n(.*?)^\.SH ", text, re.S | re.M)
    assert m, "liblockswap(7) has no SETTINGS section"
    return set(re.findall(r"^\.TP\n\.B (LOCKSWAP_[A-Z0-9_]+)$", m.group(1), re.M))


class ManPages(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.cwd = cls.tmp.name        # LOCKSWAP_STATS_FILE= and the like write nothing elsewhere
        cls.documented = documented_settings()
        cls.accepted_cache = {}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def accepted(self, name):
        if name not in self.accepted_cache:
            r = run_lib({name: ""}, self.cwd)
            self.accepted_cache[name] = UNKNOWN not in r.stderr
        return self.accepted_cache[name]

    def test_unknown_names_are_refused(self):
        # The probe below means something only if the library refuses names.
        self.assertFalse(self.accepted("LOCKSWAP_NO_SUCH_SETTING"))

    def test_listed_settings_are_documented(self):
        r = run_lib({"LOCKSWAP_LIST": "1"}, self.cwd)
        self.assertEqual(r.returncode, 0, r.stderr)
        listed = set(re.findall(r"^  (LOCKSWAP_[A-Z0-9_]+) = ", r.stderr, re.M))
        self.assertIn("LOCKSWAP_MUTEX", listed)
        self.assertEqual(listed - self.documented, set(), "listed by the library, not in liblockswap(7)")

    def test_accepted_names_in_the_library_are_documented(self):
        data = open(os.path.realpath(LIB), "rb").read()
        names = {s.decode() for s in re.findall(rb"(?<=\0)(LOCKSWAP_[A-Z0-9_]*[A-Z0-9])(?=\0)", data)}
        self.assertIn("LOCKSWAP_SELECT", names)
        accepted = {n for n in names if self.accepted(n)}
        self.assertEqual(accepted - self.documented, set(),
                         "accepted by the library, not documented in liblockswap(7)'s SETTINGS")

    def test_documented_settings_exist(self):
        self.assertGreater(len(self.documented), 20)
        self.assertEqual({n for n in self.documented if not self.accepted(n)}, set(),
                         "documented in liblockswap(7), refused by the library")

    def test_every_name_the_pages_mention_exists(self):
        for page in [PAGE7] + PAGES1:
            names = {m.decode() for m in NAME.findall(open(page, "rb").read())}
            with self.subTest(page=os.path.basename(page)):
                self.assertEqual({n for n in names if not self.accepted(n)}, set())

    def test_help_shows_each_page(self):
        for topic, title in (("lockswap", "LOCKSWAP(1)"), ("compare", "LOCKSWAP-COMPARE(1)"),
                             ("report", "LOCKSWAP-REPORT(1)"), ("doctor", "LOCKSWAP-DOCTOR(1)"),
                             ("liblockswap", "LIBLOCKSWAP(7)"), ("settings", "LIBLOCKSWAP(7)")):
            with self.subTest(topic=topic):
                r = subprocess.run([WRAPPER, "help", topic], capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                if "not found" not in r.stderr:
                    self.assertIn(title, r.stdout)
        r = subprocess.run([WRAPPER, "help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0)
        self.assertIn("liblockswap", r.stdout)
        r = subprocess.run([WRAPPER, "help", "no-such-topic"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)

    def test_help_without_man_prints_the_source(self):
        fake = os.path.join(self.cwd, "fakebin")
        os.makedirs(fake, exist_ok=True)
        with open(os.path.join(fake, "man"), "w") as f:
            f.write("#!/bin/sh\nexit 1\n")
        os.chmod(os.path.join(fake, "man"), 0o755)
        env = dict(os.environ, PATH=fake + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
        r = subprocess.run([WRAPPER, "help", "liblockswap"], env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(".TH LIBLOCKSWAP 7", r.stdout)
        self.assertIn(".B LOCKSWAP_MUTEX", r.stdout)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=1)
