"""``python -m sglang_simulator.check_args <arguments>``: validate a command line.

Parses exactly like ``sglang serve`` / ``python -m sglang.launch_server`` of
SGLang 0.5.23 (exit 2 and argparse's message on a bad flag, plus the
replacement of a flag an earlier release accepted), and prints the parsed
ServerArgs fields as one JSON object (defaults filled in, sorted keys).
Values SGLang decides later (auto ``mem_fraction_static``, speculative
defaults, ...) need the model and GPUs and are not applied here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from .args import parse_args
from .checks import base_settings
from .facts import load_facts


def main(argv: Sequence[str] | None = None) -> int:
    facts = load_facts()
    parsed = parse_args(list(sys.argv[1:] if argv is None else argv), facts)
    print(json.dumps(base_settings(parsed, facts), sort_keys=True, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
