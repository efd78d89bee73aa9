"""The entry point: `lockswap report ...` or `lockswap compare ...` (with --wrapper)."""

import sys
from .common import PROG, warn
from .compare import cmd_compare
from .report import cmd_report


def main(argv):
    wrapper = None
    if argv[:1] == ["--wrapper"] and len(argv) >= 2:
        wrapper, argv = argv[1], argv[2:]
    if not argv or argv[0] not in ("report", "compare"):
        print(f"usage: {PROG} report|compare ... (see {PROG} report --help, {PROG} compare --help)",
              file=sys.stderr)
        return 2
    try:
        if argv[0] == "report":
            return cmd_report(argv[1:])
        return cmd_compare(argv[1:], wrapper)
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as e:   # a bug here: one line, never a traceback over the user's data
        warn(f"{argv[0]}: internal error: {type(e).__name__}: {e} (please report it)")
        return 1
