"""The entry point: `lockswap report ...`, `lockswap compare ...` (with --wrapper) or
`lockswap doctor ...`, one argparse subparser each."""

import argparse
import sys
from .common import PROG, warn
from .attribute import attribute_parser, cmd_attribute
from .compare import cmd_compare, compare_parser
from .doctor import cmd_doctor, doctor_parser
from .report import cmd_report, report_parser

USAGE = f"usage: {PROG} report|compare ... (see {PROG} report --help, {PROG} compare --help)"


class _TopParser(argparse.ArgumentParser):
    """The parser of the first word: a missing or unknown subcommand prints USAGE (exit 2)."""

    def error(self, message):
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)


def parser():
    p = _TopParser(prog=PROG, add_help=False)
    p.add_argument("--wrapper", metavar="PATH", help="the lockswap command (compare runs each row through it)")
    sub = p.add_subparsers(dest="subcommand", required=True, parser_class=argparse.ArgumentParser)
    report_parser(lambda **kw: sub.add_parser("report", **kw))
    compare_parser(lambda **kw: sub.add_parser("compare", **kw))
    doctor_parser(lambda **kw: sub.add_parser("doctor", **kw))
    attribute_parser(lambda **kw: sub.add_parser("attribute", **kw))
    return p, sub.choices


def main(argv):
    top, subparsers = parser()
    args, extra = top.parse_known_args(argv)   # --help and errors exit here, as argparse does
    if extra:   # the subcommand's error, as its own parse_args would give it
        subparsers[args.subcommand].error("unrecognized arguments: " + " ".join(extra))
    if args.subcommand == "doctor":
        return cmd_doctor(args, subparsers["doctor"])
    if args.subcommand == "attribute":
        return cmd_attribute(args, subparsers["attribute"])
    try:
        if args.subcommand == "report":
            return cmd_report(args)
        rest = argv[argv.index("compare", 2 if argv[:1] == ["--wrapper"] else 0) + 1:]
        return cmd_compare(args, rest, args.wrapper, subparsers["compare"])
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as e:   # a bug here: one line, never a traceback over the user's data
        warn(f"{args.subcommand}: internal error: {type(e).__name__}: {e} (please report it)")
        return 1
