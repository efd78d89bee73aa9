"""`python3 path/to/lockswap_cli ARGS`: run as a directory, the package's parent
(where lockswap_stats.py sits, in the source, build and install trees alike) is
put on the path so the package imports as itself."""
import os
import sys

if not __package__:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lockswap_cli.main import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
