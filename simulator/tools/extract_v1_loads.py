#!/usr/bin/env python3
"""Extract how a real SGLang release answers ``GET /v1/loads`` from its wheel's own source.

    pip download --no-deps sglang==0.5.23 -d /tmp/sglang
    python3 simulator/tools/extract_v1_loads.py /tmp/sglang/sglang-0.5.23-*.whl

Reads ``sglang/srt/managers/load_snapshot.py`` of the wheel (no import: it needs torch) and writes
``simulator/src/sglang_simulator/data/v1_loads-<version>.json``: the ``LoadSnapshot`` fields in the
release's order (``core``: every field but the sections, all of them in every answer, as ``to_dict`` reads
them with ``getattr``), the sections with the ``include=`` name that selects each (``to_dict``'s table), and
``VALID_SECTIONS``. The SGLang Model Gateway polls ``/v1/loads?include=core,disagg,queues,memory``
(tests/recordings/smg-1.13.0): the simulator answers that query with exactly those sections. The output is
deterministic; never edit it by hand.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "simulator" / "src" / "sglang_simulator" / "data"
SOURCE = "sglang/srt/managers/load_snapshot.py"


def extract(source: str) -> dict[str, object]:
    tree = ast.parse(source)
    snapshot = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LoadSnapshot")
    fields = [
        n.target.id for n in snapshot.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]
    valid: list[str] = []
    sections: list[list[str]] = []
    for node in ast.walk(snapshot):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "VALID_SECTIONS" for t in node.targets
        ):
            valid = sorted(ast.literal_eval(node.value.args[0]))  # type: ignore[attr-defined]
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple):
            for element in node.iter.elts:
                if isinstance(element, ast.Tuple) and len(element.elts) == 3:
                    field, name = (ast.literal_eval(part) for part in element.elts[:2])
                    sections.append([field, name])
    if not (fields and valid and sections):
        raise SystemExit(f"{SOURCE}: LoadSnapshot, VALID_SECTIONS or to_dict's sections not found")
    section_fields = {field for field, _ in sections}
    return {
        "core": [f for f in fields if f not in section_fields],
        "sections": sections,
        "valid_sections": valid,
    }


def main(wheel: str) -> Path:
    version = re.match(r"sglang-([^-]+)-", Path(wheel).name)
    if not version:
        raise SystemExit(f"{wheel}: not an sglang wheel")
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read(SOURCE).decode()
    table = {"sglang_version": version.group(1), "source": f"{Path(wheel).name}:{SOURCE}", **extract(source)}
    out = DATA / f"v1_loads-{version.group(1)}.json"
    out.write_text(json.dumps(table, indent=1) + "\n")
    return out


if __name__ == "__main__":
    print(main(sys.argv[1]))
