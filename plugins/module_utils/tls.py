"""TLS files the fleet installs from PEM files the operator gives on the control node (issue 38, finding 8): the fleet
gateway's (role sglang_router) and the instances' (role sglang_server), one rule for both."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang.fleet.plugins.module_utils.problems import problem_line

# The instances' certificate and key, in the servers' secrets folder (root's; the servers' group reads it), and the CA
# their certificates chain to, in the helpers' folder (public: the host's clients of the instances and its routers
# verify them with it).
SERVER_FILES = {"cert": "server-tls.pem", "key": "server-tls.key"}
SERVER_CA = "server-ca.pem"


def given_path(value: Any) -> bool:
    """Whether `value` can name a PEM file on the control node: an absolute path without a control character."""
    text = str(value or "")
    return text.startswith("/") and not any(ord(char) < 32 or ord(char) == 127 for char in text)


def serves_tls(cert: Any, key: Any) -> bool:
    """Whether a certificate and its key are both given, each a usable path: the server serves https."""
    return given_path(cert) and given_path(key)


def server_tls_paths(secrets_dir: str) -> dict[str, str]:
    """Where the instances' certificate and key are on their host (SGLang's --ssl-certfile, --ssl-keyfile)."""
    return {name: f"{secrets_dir.rstrip('/')}/{file}" for name, file in SERVER_FILES.items()}


def pem_files(
    host: str, where: str, prefix: str, given: Mapping[str, Any], paths: Mapping[str, str], group: str, serves: bool = True
) -> dict[str, Any]:
    """The TLS files of a server on `host` (`where`: "gateway", "host"), from the control node's PEM files `given`
    ({cert, key, ca}: the variables `<prefix>_cert`, `_key`, `_ca`) to `paths` on the host (the same names). The
    certificate and key, root:<`group`> 0640 (the server's account reads them and can neither replace nor widen them;
    the key private: never logged, never in a diff), when the host runs such a server (`serves`) and both are given;
    the CA, root 0644, wherever it is given. Returns the files to write (`files`, as sglang_instance_files takes them;
    none when a variable has a problem), the paths of those not written, removed when found (`absent`), the paths on the
    host (`cert_path`, `key_path` when it serves TLS, `ca_file` with a CA; "" otherwise), whether it does (`enabled`),
    and `problems` (lines naming the host, `where` and the variable)."""
    values = {name: str(given.get(name) or "") for name in paths}
    problems = [
        problem_line(host, where, f"{prefix}_{name}", value, "not an absolute path of a file on the control node",
                     "give the PEM file's absolute path on the control node")
        for name, value in values.items()
        if value and not (given_path(value) and os.path.isfile(value))
    ]  # fmt: skip
    if bool(values.get("cert")) != bool(values.get("key")):
        missing = "key" if values.get("cert") else "cert"
        problems.append(
            problem_line(host, where, f"{prefix}_{missing}", "", "the certificate and its key go together",
                         f"set both {prefix}_cert and {prefix}_key, or neither")
        )  # fmt: skip
    enabled = serves and serves_tls(values.get("cert"), values.get("key"))
    files: list[dict[str, Any]] = []
    if enabled:
        files += [
            {"src": values["cert"], "dest": paths["cert"], "owner": "root", "group": group, "mode": "0640"},
            {"src": values["key"], "dest": paths["key"], "owner": "root", "group": group, "mode": "0640", "private": True},
        ]
    if values.get("ca"):
        files.append({"src": values["ca"], "dest": paths["ca"], "owner": "root", "group": "root", "mode": "0644"})
    written = {file["dest"] for file in files}
    return {
        "enabled": enabled,
        "files": [] if problems else files,
        "absent": [path for path in paths.values() if path not in written],
        "cert_path": paths["cert"] if enabled else "",
        "key_path": paths["key"] if enabled else "",
        "ca_file": paths["ca"] if values.get("ca") else "",
        "problems": problems,
    }


def certificate_facts(path: str) -> dict[str, Any]:
    """What the fleet checks of a PEM certificate on the control node (cryptography: ansible-core's own dependency
    there): its IP addresses and DNS names (subjectAltName) and its extended key usages (None: unrestricted). Raises
    OSError or ValueError for a file that is no PEM certificate."""
    from pathlib import Path

    from cryptography import x509

    certificate = x509.load_pem_x509_certificate(Path(path).read_bytes())
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        ips, dns = [str(ip) for ip in names.get_values_for_type(x509.IPAddress)], names.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        ips, dns = [], []
    try:
        usages: list[Any] | None = list(certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        usages = None
    return {"ips": ips, "dns": [str(name) for name in dns], "usages": usages}


def names_address(facts: Mapping[str, Any], address: str) -> bool:
    """Whether a certificate (certificate_facts) is valid for `address` as Python's ssl module checks it: an IP address
    among its IP addresses, a name among its DNS names (a leading "*." matching one label)."""
    try:
        wanted = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        name = address.lower().rstrip(".")
        for pattern in (str(entry).lower().rstrip(".") for entry in facts["dns"]):
            if pattern == name or (pattern.startswith("*.") and name.partition(".")[2] == pattern[2:] and "." in name):
                return True
        return False
    return wanted in [ipaddress.ip_address(ip) for ip in facts["ips"]]


def unnamed_addresses(path: str, addresses: Sequence[str]) -> tuple[list[str], str]:
    """The `addresses` the certificate at `path` does not name, and why it could not be read ("" when it could)."""
    try:
        facts = certificate_facts(path)
    except (OSError, ValueError) as error:
        return [], f"cannot be read as a PEM certificate ({error})"
    return [address for address in addresses if not names_address(facts, address)], ""
