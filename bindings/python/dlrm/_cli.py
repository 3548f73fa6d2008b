"""The ``dlrm`` console command of a pip install: runs the command-line tool bundled in
dlrm/_bin/ (the same `dlrm` as the C++ build's: generate, train, eval, export, launch,
plan, bench), with the arguments given."""
from __future__ import annotations

import os
import sys
from pathlib import Path

_BUNDLED = Path(__file__).resolve().parent / "_bin" / "dlrm"


def main() -> None:
    if not os.access(_BUNDLED, os.X_OK):
        sys.exit(f"dlrm: this install has no command-line tool at {_BUNDLED}; reinstall the "
                 "package from a libdlrm build (pip install bindings/python)")
    os.execv(str(_BUNDLED), [str(_BUNDLED)] + sys.argv[1:])
