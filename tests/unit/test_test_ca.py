"""scripts/test_ca.py keeps the sandbox's test CA and gateway certificate only while they still go together: a server
key that is not the certificate's (a run cut short between the files, a file replaced) or a certificate another CA
issued makes all three again; otherwise a later run changes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from fleet import ROOT


def make(directory: Path, *names: str) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts/test_ca.py"), str(directory), *names], check=True)


def matching(directory: Path) -> bool:
    certificate = x509.load_pem_x509_certificate((directory / "server.pem").read_bytes())
    key = serialization.load_pem_private_key((directory / "server.key").read_bytes(), password=None)
    public = (serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    certificate.verify_directly_issued_by(x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes()))
    return bool(key.public_key().public_bytes(*public) == certificate.public_key().public_bytes(*public))


def test_kept_while_they_go_together_made_again_when_not(tmp_path: Path) -> None:
    first, other = tmp_path / "first", tmp_path / "other"
    make(first, "127.0.0.1", "ct129")
    make(other, "127.0.0.1", "ct129")
    kept = {name: (first / name).read_bytes() for name in ("ca.pem", "server.pem", "server.key")}
    make(first, "127.0.0.1")
    assert {name: (first / name).read_bytes() for name in kept} == kept, "covered: nothing changes"
    assert (first / "server.key").stat().st_mode & 0o777 == 0o600
    # Another pair's key beside this certificate: made again, a pair that goes together.
    (first / "server.key").write_bytes((other / "server.key").read_bytes())
    make(first, "127.0.0.1")
    assert matching(first) and (first / "ca.pem").read_bytes() != kept["ca.pem"]
    # Another CA's certificate: made again too.
    (first / "ca.pem").write_bytes((other / "ca.pem").read_bytes())
    make(first, "127.0.0.1")
    assert matching(first)
