"""lockswap report / lockswap compare — the Python half of the `lockswap` command.

tools/lockswap.in (the bash wrapper) runs this package (`python3 .../lockswap_cli
report ...`), passing its own path with --wrapper so compare can run each variant
through it. Standard library only (argparse, json, csv, subprocess); matplotlib is
imported only for --png and its absence is reported, not fatal. The statistics file
format is the library's contract, version 1 (lockswap-v1 records, see
`lockswap report --help`).

statsfile reads the dumps, symbolize turns addresses into functions, merge sums
processes, report and compare are the two subcommands, main picks one.
"""
