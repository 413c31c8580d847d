#!/usr/bin/env python3
"""The stand-in ``umount``: fake_mount.py's ``main`` under the name ``umount`` (see there)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if __name__ == "__main__":
    spec = importlib.util.spec_from_file_location("fake_mount", Path(__file__).with_name("fake_mount.py"))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.exit(module.main("umount", sys.argv[1:]))
