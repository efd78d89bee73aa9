"""`python3 DIR ARGS`, DIR holding the lockswap_cli package (tools/ in the source
tree, <libexec>/lockswap built and installed): how the `lockswap` command runs
`report`, `compare` and `doctor`. Python puts DIR first on the import path."""
import sys

from lockswap_cli.main import main

sys.exit(main(sys.argv[1:]))
