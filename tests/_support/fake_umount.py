#!/usr/bin/env python3
"""The stand-in ``umount``: fake_mount.py run under this name (see there)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.argv[0] = __file__
    runpy.run_path(str(Path(__file__).with_name("fake_mount.py")), run_name="__main__")
