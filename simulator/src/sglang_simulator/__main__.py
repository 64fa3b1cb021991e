"""``python -m sglang_simulator <sglang.launch_server arguments>``."""

from __future__ import annotations

import sys

from .launcher import main

if __name__ == "__main__":
    sys.exit(main())
