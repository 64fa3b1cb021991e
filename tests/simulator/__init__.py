"""Tests of the SGLang simulator (simulator/); a package so that its conftest
and helpers never shadow the top-level ``tests/conftest.py`` module."""

import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parents[2] / "simulator" / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)
