"""`python3 -m lockswap_cli ARGS`, with the directory holding the package on the
import path (PYTHONPATH; the `lockswap` command runs the directory itself, whose
__main__.py is the same two lines)."""
import sys

from .main import main

sys.exit(main(sys.argv[1:]))
