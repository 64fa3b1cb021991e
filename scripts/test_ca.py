"""A throw-away test CA and one server certificate signed by it, for the sandbox's TLS gateway and the tests (issue 38).

    python scripts/test_ca.py DIR NAME [NAME ...]

Writes DIR/ca.pem (the CA's certificate: what clients verify with), DIR/server.pem and DIR/server.key (the server's
certificate for every NAME, a DNS name or an IP address, for serverAuth and clientAuth, and its private key,
0600). The CA's own key is never written: nothing can sign another certificate with this CA afterwards. An existing
DIR/ca.pem whose server certificate still covers every NAME (and both usages) is kept (a later deploy changes
nothing); otherwise all three are made again.
Never for production: an operator brings the fleet's own CA and certificates (README, "Security").
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import sys
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def subject_names(names: list[str]) -> list[x509.GeneralName]:
    found: list[x509.GeneralName] = []
    for name in names:
        try:
            found.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            found.append(x509.DNSName(name))
    return found


def covers(directory: Path, names: list[str]) -> bool:
    """Whether the directory's server certificate exists, is valid for another day, names every one of `names`, was
    issued by its ca.pem, and goes with its server.key (a run cut short between the files, or a file replaced, makes
    all three again)."""
    try:
        loaded = x509.load_pem_x509_certificate((directory / "server.pem").read_bytes())
        ca = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
        key = serialization.load_pem_private_key((directory / "server.key").read_bytes(), password=None)
        loaded.verify_directly_issued_by(ca)
    except (OSError, ValueError, TypeError, InvalidSignature):
        return False
    if loaded.not_valid_after_utc < datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1):
        return False
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(serialization.Encoding.PEM, public) != loaded.public_key().public_bytes(
        serialization.Encoding.PEM, public
    ):
        return False
    present = set(loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    usages = set(loaded.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    return set(subject_names(names)) <= present and set(USAGES) <= usages


# The server certificate's extended key usages: serverAuth (the gateway's https), and clientAuth, which smg 1.13.0's
# mesh over TLS needs of the same certificate, presented to its peers (tests/recordings/smg-1.13.0-mesh).
USAGES = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)


def make(directory: Path, names: list[str], days: int = 30, usages: tuple[x509.ObjectIdentifier, ...] = USAGES) -> None:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sglang-fleet test CA (throw-away)")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(subject_names(names)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(directory / "server.key", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
    (directory / "server.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    (directory / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    directory, names = Path(argv[0]), argv[1:]
    if not covers(directory, names):
        make(directory, names)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
