#!/usr/bin/env python3
"""Extract the fields a real nvidia-smi accepts from its recorded ``--help-query-*`` texts.

    python3 simulator/tools/extract_nvidia_smi_fields.py [RECORDING_DIR] [--output FILE]

Reads ``help-query-gpu.txt`` and ``help-query-compute-apps.txt`` of a recording
(default: ``tests/recordings/h200-driver-580.159.04``) and writes
``simulator/src/sglang_simulator/data/nvidia-smi-<driver>-fields.json``: for
``--query-gpu`` and ``--query-compute-apps``, every field in the driver's own
order, each as its list of names (``["name", "gpu_name"]``: the first is what
the CSV header shows, the others are aliases).  The stand-in ``nvidia-smi``
accepts exactly these names.  The output is deterministic; never edit it by hand.

A field line of the help text is a line made only of quoted names joined by
`` or `` (``"uuid" or "gpu_uuid"``); lines that merely start with a quote
(``"0: Default" means ...``) are descriptions.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RECORDING = ROOT / "tests" / "recordings" / "h200-driver-580.159.04"
DATA = ROOT / "simulator" / "src" / "sglang_simulator" / "data"
FIELD_LINE = re.compile(r'"[^"\s]+"(?: or "[^"\s]+")*')
NAME = re.compile(r'"([^"]+)"')


def fields(help_text: str) -> list[list[str]]:
    """Each field of one ``--help-query-*`` text as [name, *aliases], in the text's order."""
    return [NAME.findall(line) for line in help_text.splitlines() if FIELD_LINE.fullmatch(line.strip())]


def extract(recording: Path) -> dict[str, object]:
    def read(name: str) -> str:
        return (recording / name).read_text(encoding="utf-8")

    return {
        "generated_by": "simulator/tools/extract_nvidia_smi_fields.py",
        "source": f"{recording.name}/help-query-gpu.txt, help-query-compute-apps.txt",
        "query_gpu": fields(read("help-query-gpu.txt")),
        "query_compute_apps": fields(read("help-query-compute-apps.txt")),
    }


def driver_of(recording: Path) -> str:
    match = re.search(r"driver-(\d+(?:\.\d+)+)$", recording.name)
    if not match:
        raise SystemExit(f"cannot tell the driver version from the directory name {recording.name!r}")
    return match.group(1)


def render(recording: Path) -> str:
    """The JSON text, one field a line."""
    lines = []
    for key, value in extract(recording).items():
        if isinstance(value, list):
            rows = ",\n".join(f"  {json.dumps(names)}" for names in value)
            lines.append(f"{json.dumps(key)}: [\n{rows}\n ]")
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value)}")
    return "{\n " + ",\n ".join(lines) + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("recording", nargs="?", type=Path, default=DEFAULT_RECORDING)
    parser.add_argument("--output", type=Path, help="default: data/nvidia-smi-<driver>-fields.json")
    args = parser.parse_args(argv)
    output: Path = args.output or DATA / f"nvidia-smi-{driver_of(args.recording)}-fields.json"
    output.write_text(render(args.recording), encoding="utf-8")
    print(f"wrote {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
