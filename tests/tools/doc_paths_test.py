#!/usr/bin/env python3
"""tests/tools/doc_paths_test.py — every repository path the documents name exists.

    doc_paths_test.py [SOURCE_DIR]     (default: the repository this file is in)

Reads README.md, docs/**/*.md and the manual pages (man/*.1, man/*.7.in) and
checks two kinds of names against the source tree:

- a path token: a run of path characters that starts with one of the
  repository's top-level directories (TOP_DIRS) or is one of its top-level
  files (TOP_FILES), not glued to a path before it (`build/preload/x.so`
  is a build output, `/usr/share/man/...` a system path: neither is checked);
- the target of a Markdown link, `[text](target)`, resolved from the file
  that holds it (URLs and in-page anchors are not paths).

The exception rule, one for all: a token that names a family of paths
rather than one path is checked only as far as it is literal.
- `*` is a glob: it must match at least one path.
- `{a,b}` is expanded: each alternative must exist.
- a placeholder segment ends the check at its parent directory, which must
  exist: one containing `<` (`<prefix>`, `<version>`), `...`, or an
  upper-case name of one to four letters standing for a value (`N`, `X`,
  `NAME`, `ISA`), as in `tests/lwlock/<case>` or `examples/servers/N.sh`.

And one check the other way: every document under docs/ has its line in
docs/README.md, the reading order (a Markdown link to it).

Each missing path is printed as FILE:LINE: TOKEN, each document without a
line as FILE: not in docs/README.md; the exit status is 1 if there is one,
else 0. Run by ctest as tools/doc_paths (label tools).
"""

import glob
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))

# The top-level directories and files a document may name (the layout is
# docs/layout.md). A name that starts with anything else is not checked.
TOP_DIRS = ("arch", "cmake", "core", "docs", "examples", "man", "preload",
            "scripts", "tests", "tools", ".ci")
TOP_FILES = ("CMakeLists.txt", "README.md", ".gitignore")

# Path characters; a `{...}` group may hold commas (`ops.{h,cpp}`).
PATH_CHARS = r"(?:[A-Za-z0-9_.+*<>%@~-]|/|\{[^{}\s]*\})"
TOKEN = re.compile(
    r"(?<![A-Za-z0-9_./~$-])"                     # not the tail of a longer path
    r"((?:" + "|".join(re.escape(d) for d in TOP_DIRS) + r")/" + PATH_CHARS + r"*"
    r"|(?:" + "|".join(re.escape(f) for f in TOP_FILES) + r")(?![A-Za-z0-9_./-]))")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"<|\.\.\.|^[A-Z]{1,4}(?:\.[a-z0-9.]+)?$")
ROFF_ESCAPE = re.compile(r"\\f(?:[BIRP]|\(..|\[[^]]*\])|\\&|\\\(..")


def documents():
    names = ["README.md"]
    names += sorted(os.path.relpath(p, ROOT) for p in
                    glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    names += sorted(os.path.relpath(p, ROOT) for p in
                    glob.glob(os.path.join(ROOT, "man", "*.[1-8]")) +
                    glob.glob(os.path.join(ROOT, "man", "*.[1-8].in")))
    return names


def expand_braces(token):
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(token[:m.start()] + alt + token[m.end():])
    return out


def literal_part(path):
    """The part of PATH before its first placeholder segment (see above)."""
    segments = path.split("/")
    for i, seg in enumerate(segments):
        if PLACEHOLDER.search(seg):
            return "/".join(segments[:i]), True
    return path, False


def exists(path):
    """PATH (relative to ROOT, no braces) exists, as the exception rule reads it."""
    path, cut = literal_part(path)
    if cut and not path:
        return True                               # nothing literal to check
    full = os.path.join(ROOT, path)
    if "*" in path:
        return bool(glob.glob(full))
    return os.path.exists(full)


def clean(token):
    """TOKEN without the sentence punctuation after it (`see core/cid.h.`)."""
    return token.rstrip(".,;:")


def check(name):
    missing = []
    base = os.path.dirname(name)
    roff = not name.endswith(".md")
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            text = ROFF_ESCAPE.sub("", line).replace("\\-", "-") if roff else line
            tokens = set()
            for m in TOKEN.finditer(text):
                tokens.add(clean(m.group(1)))
            if not roff:
                for m in LINK.finditer(text):
                    target = m.group(1).split("#", 1)[0]
                    if not target or target.startswith("/") or re.match(r"[a-z][a-z0-9+.-]*:", target):
                        continue                  # an anchor in the page, a URL, not the repository
                    tokens.add(os.path.normpath(os.path.join(base, target)))
            for token in sorted(tokens):
                if not token:
                    continue
                for path in expand_braces(token):
                    if not exists(path):
                        missing.append(f"{name}:{lineno}: {token}")
                        break
    return missing


def unlisted(names):
    """The documents under docs/ that docs/README.md does not link."""
    door = os.path.join("docs", "README.md")
    if not os.path.exists(os.path.join(ROOT, door)):
        return [f"{door}: missing (the documents' reading order)"]
    with open(os.path.join(ROOT, door), encoding="utf-8") as f:
        linked = {os.path.normpath(os.path.join("docs", m.group(1).split("#", 1)[0]))
                  for m in LINK.finditer(f.read())}
    return [f"{name}: not in {door}" for name in names
            if name.startswith("docs" + os.sep) and name != door and name not in linked]


def main():
    missing = []
    names = documents()
    for name in names:
        missing += check(name)
    missing += unlisted(names)
    for m in missing:
        print(m)
    if missing:
        print(f"doc_paths: {len(missing)} problem(s): paths named in the documents that do not "
              "exist, documents docs/README.md does not list (the rules: the top of "
              "tests/tools/doc_paths_test.py)")
        return 1
    print(f"doc_paths: every path named in {len(names)} documents exists, "
          "and docs/README.md lists every document under docs/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
