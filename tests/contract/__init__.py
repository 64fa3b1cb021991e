"""Contract tests: the SGLang simulator held to recordings of real SGLang (tests/recordings/)."""

import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parents[2] / "simulator" / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)
