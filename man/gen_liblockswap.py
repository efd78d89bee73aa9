#!/usr/bin/env python3
"""man/gen_liblockswap.py — liblockswap(7) from man/liblockswap.7.in and the
library's own listing of its settings.

The SETTINGS and MATRIX COLUMNS sections of the page are what the library
prints for LOCKSWAP_LIST=1 (preload/config/config.cpp, say_valid_settings and the
columns of preload/config/variant_columns.def): the same tables it validates the
environment against, so the page cannot drift from them. Run at build time
(man/CMakeLists.txt):

    gen_liblockswap.py --lib build/preload/liblockswap.so \\
        --template man/liblockswap.7.in --out build/share/man/man7/liblockswap.7

--listing FILE takes a saved listing instead of running the library.
--names prints the setting names parsed from the listing, one a line.
"""

import argparse
import os
import re
import subprocess
import sys

ENTRY = re.compile(r"^  (LOCKSWAP_[A-Z0-9_]+) = (.*)$")
COLUMN = re.compile(r"^  (\S+) (LOCKSWAP_\S+)$")


def listing_of(lib):
    """The library's LOCKSWAP_LIST=1 text (it prints it before main and exits 0)."""
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": os.path.abspath(lib), "LOCKSWAP_LIST": "1"}
    true = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"
    r = subprocess.run([true], env=env, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit(f"gen_liblockswap: LOCKSWAP_LIST=1 under {lib} exited {r.returncode}:\n{r.stderr}")
    return r.stderr


def parse(text):
    """([(name, first line, [continuation lines])], [(column, settings, description)])"""
    settings, columns, part = [], [], None
    for line in text.splitlines():
        if line.startswith("lockswap: valid settings"):
            part = "settings"
            continue
        if line.startswith("lockswap: columns"):
            part = "columns"
            continue
        if part == "settings":
            m = ENTRY.match(line)
            if m:
                settings.append((m.group(1), m.group(2), []))
            elif line.startswith("    ") and settings:
                settings[-1][2].append(line[4:])
            elif line.strip():
                sys.exit(f"gen_liblockswap: unexpected line in the settings listing: {line!r}")
        elif part == "columns":
            m = COLUMN.match(line)
            if m:
                columns.append([m.group(1), m.group(2), ""])
            elif line.startswith("      ") and columns:
                columns[-1][2] = (columns[-1][2] + " " + line.strip()).strip()
            elif line.strip():
                sys.exit(f"gen_liblockswap: unexpected line in the columns listing: {line!r}")
    if not settings or not any(n == "LOCKSWAP_LIST" for n, _, _ in settings) or not columns:
        sys.exit("gen_liblockswap: the listing holds no settings or no columns:\n" + text)
    return settings, columns


def roff(s):
    """Plain text as roff: backslashes escaped, hyphens as minus signs,
    a leading '.' or quote neutralised."""
    s = s.replace("\\", "\\e").replace("-", "\\-")
    s = re.sub(r"`([^`]+)`", r"\\fB\1\\fR", s)
    return "\\&" + s if s[:1] in (".", "'") else s


def settings_roff(settings):
    out = []
    for name, first, more in settings:
        out += [".TP", f".B {name}", roff(first)]
        literal = False
        for line in more:
            if line.startswith("  "):          # a table inside the entry (LOCKSWAP_SELECT's matchers)
                if not literal:
                    out += [".RS", ".nf"]
                    literal = True
                out.append(roff(line))
            else:
                if literal:
                    out += [".fi", ".RE"]
                    literal = False
                out.append(roff(line))
        if literal:
            out += [".fi", ".RE"]
    return "\n".join(out)


def columns_roff(columns):
    out = []
    for name, sets, desc in columns:
        out += [".TP", f".B {roff(name)}", roff(sets.replace(",", ", ")), ".br", roff(desc)]
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--lib", help="the liblockswap.so to ask (LOCKSWAP_LIST=1)")
    src.add_argument("--listing", help="a saved LOCKSWAP_LIST=1 output")
    p.add_argument("--template", help="man/liblockswap.7.in")
    p.add_argument("--out", help="the page to write")
    p.add_argument("--names", action="store_true", help="print the setting names and stop")
    a = p.parse_args()
    text = listing_of(a.lib) if a.lib else open(a.listing, encoding="utf-8").read()
    settings, columns = parse(text)
    if a.names:
        print("\n".join(n for n, _, _ in settings))
        return 0
    if not a.template or not a.out:
        p.error("--template and --out are needed to write the page")
    page = open(a.template, encoding="utf-8").read()
    for marker, body in (("@SETTINGS@", settings_roff(settings)), ("@COLUMNS@", columns_roff(columns))):
        if page.count("\n" + marker + "\n") != 1:
            sys.exit(f"gen_liblockswap: {a.template} must hold {marker} once, on a line of its own")
        page = page.replace("\n" + marker + "\n", "\n" + body + "\n")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
