"""The execution environment's collection artifacts (scripts/ee-image.sh), packed without a Galaxy server.

usage: pack_collections.py REQUIREMENTS OUTPUT_DIR [ARTIFACT...]

Packs each collection that REQUIREMENTS (requirements/collections.yml) names, and each it depends on, from the
installed `ansible` package (the control venv's, pinned) into OUTPUT_DIR/collections/<ns>-<name>-<version>.tar.gz,
and writes OUTPUT_DIR/requirements.yml naming those and the ARTIFACTs already there (sglang.fleet's) for
`ansible-galaxy collection install --offline`. The `ansible` package leaves out each collection's tests/, docs/ and
dotfiles: an artifact's FILES.json lists the files it kept, each checked here against the release's checksum, and
again by ansible-galaxy when it installs them.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

import ansible_collections
import yaml


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size, member.mode = len(data), 0o644
    tar.addfile(member, io.BytesIO(data))


def pack(source: Path, output: Path) -> tuple[str, list[str]]:
    """The installed collection in source as an artifact in output: its file name and the collections it needs."""
    manifest: dict[str, Any] = json.loads((source / "MANIFEST.json").read_text())
    info = manifest["collection_info"]
    files: dict[str, Any] = json.loads((source / "FILES.json").read_text())
    kept = [entry for entry in files["files"] if entry["name"] == "." or (source / entry["name"]).exists()]
    for entry in kept:
        if entry["ftype"] == "file":
            digest = hashlib.sha256((source / entry["name"]).read_bytes()).hexdigest()
            if digest != entry["chksum_sha256"]:
                sys.exit(f"{source / entry['name']} differs from the release's")
    files_json = json.dumps({**files, "files": kept}, indent=4).encode()
    manifest["file_manifest_file"]["chksum_sha256"] = hashlib.sha256(files_json).hexdigest()
    artifact = output / f"{info['namespace']}-{info['name']}-{info['version']}.tar.gz"
    with tarfile.open(artifact, "w:gz") as tar:
        add_bytes(tar, "MANIFEST.json", json.dumps(manifest, indent=4).encode())
        add_bytes(tar, "FILES.json", files_json)
        for entry in kept:
            if entry["name"] != ".":
                tar.add(source / entry["name"], arcname=entry["name"], recursive=False)
    return artifact.name, list(info["dependencies"])


def main(requirements: Path, stage: Path, built: list[str]) -> None:
    installed = Path(next(iter(ansible_collections.__path__)))
    wanted = {item["name"]: str(item["version"]) for item in yaml.safe_load(requirements.read_text())["collections"]}
    artifacts: dict[str, str] = {}
    pending = list(wanted)
    while pending:
        name = pending.pop()
        if name in artifacts:
            continue
        source = installed.joinpath(*name.split("."))
        version = json.loads((source / "MANIFEST.json").read_text())["collection_info"]["version"]
        if name in wanted and version != wanted[name]:
            sys.exit(f"{name}: {requirements} names {wanted[name]}, the installed ansible package has {version}")
        artifacts[name], needs = pack(source, stage / "collections")
        pending.extend(needs)
    # Written as the repository's YAML is (yamllint reads build/ too).
    lines = ["---", "collections:"]
    for name in sorted(artifacts.values()) + sorted(built):
        lines += [f"  - name: collections/{name}", "    type: file"]
    (stage / "requirements.yml").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
