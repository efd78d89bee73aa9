"""lockswap report / compare / doctor — the Python half of the `lockswap` command.

tools/lockswap.in (the bash wrapper) runs the directory holding this package
(`python3 .../lockswap report ...`, its __main__.py), passing its own path with
--wrapper so compare can run each variant through it. Everything else finds the
package on PYTHONPATH (scripts/lib.sh, the tests' CMakeLists.txt) and may run
it as `python3 -m lockswap_cli`. Standard library only (argparse, json, csv,
subprocess); matplotlib is imported only for --png and its absence is reported,
not fatal. The statistics file format is the library's contract, version 1
(lockswap-v1 records, see `lockswap report --help`).

statsfile reads the dumps, symbolize turns addresses into functions, merge sums
processes, report, compare and doctor are the three subcommands, main picks one
(argparse subparsers). stats is the one implementation of the verdicts (median,
geomean, the sign-test interval, the core-to-core probe's tolerance), steady
what a table shows for unsteady hosts, tables the Markdown tables and gnuplot
plots of the benchmark drivers and server runners.
"""
