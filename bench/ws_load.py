"""The load generator, where the design names it: ``python bench/ws_load.py --help``.

The generator itself is ``bench/load/ws_load.py`` (``python -m bench.load.ws_load``, the same
program); this path runs it from a checkout, whether or not the project is installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    # Run as a script, the path's folder (bench/) is on sys.path, not the checkout.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.load.ws_load import main

    sys.exit(main())
