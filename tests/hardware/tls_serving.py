"""Real SGLang 0.5.17 serving TLS (--ssl-certfile/--ssl-keyfile): what a client with the CA, one without it and a
plain-http client get, and whether its own warm-up passes when --ssl-ca-certs is given.

SGLang hands the flags to uvicorn.run (entrypoints/http_server.py); its warm-up request (`_wait_and_warmup`) goes to
`server_args.url()` (https with a certificate, 127.0.0.1 for the bind address) with `verify=server_args.ssl_verify()`:
the CA file when --ssl-ca-certs is given, else no verification. This run records what a real server does. Run from the
repository root, after the bundle is unpacked:

    command: BUDGET_S=400 HW_DRIVER=tests/hardware/tls_serving.py bash tests/hardware/run.sh   carry: [".hardware"]

The certificates travel in `.hardware/tls/` (`python tests/hardware/tls_serving.py --make-certificates` writes them
there with scripts/test_ca.py, a throw-away CA each: `loopback/` for 127.0.0.1 and localhost, `named/` for
`sglang-worker.test` only; `ca.pem`, `server.pem`, `server.key` in each). Two servers, the sandbox's model with ct129's
settings (as keyed_routes.py):
- `tls` (port 30000): `--ssl-certfile loopback/server.pem --ssl-keyfile loopback/server.key`;
- `tls_ca` (port 30002): `--ssl-certfile named/server.pem --ssl-keyfile named/server.key --ssl-ca-certs named/ca.pem`
  (its warm-up verifies the CA and 127.0.0.1 against a certificate that does not name it).
The wait and every exchange go over https with the CA and no host-name check. Then, per ready server, into
`<tag>/tls.json`: the health routes, /v1/models, /metrics (head) and a greedy /generate over https with the CA; the
same /health with the host name checked; with the system's CAs only; and plain http to the TLS port. The server's log
lines about SSL and uvicorn are in the stage record (`tls_lines`), its log whole in `<tag>/server.log`.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: hardware.*, fixtures.*
from hardware.driver import Json, Run, http
from hardware.nextn_without_mtp import run_script, serve_all, server_headline
from hardware.sandbox_model import CT129, MODEL, argv_for
from hardware.sandbox_model import stage_models as sandbox_models

ROOT = Path(__file__).resolve().parents[2]
CERTS = Path(os.environ.get("HW_TLS_DIR", ROOT / ".hardware" / "tls"))
SERVERS = {"tls": (30000, "loopback", False), "tls_ca": (30002, "named", True)}
NAMES = {"loopback": ["127.0.0.1", "localhost"], "named": ["sglang-worker.test"]}


def make_certificates() -> None:
    """The server certificates of SERVERS, each with its CA, in CERTS (scripts/test_ca.py's make)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import test_ca

    for name, names in NAMES.items():
        test_ca.make(CERTS / name, names)


def client(cert: str, check_hostname: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(CERTS / cert / "ca.pem"))
    context.check_hostname = check_hostname
    return context


def probe(url: str, context: ssl.SSLContext | None) -> Json:
    """One GET with its own TLS context (None: the system's CAs, not the opener stage_servers installs), never
    raising: status, or the error."""
    context = context or ssl.create_default_context()
    try:
        with urllib.request.urlopen(url, timeout=30, context=context) as response:
            return {"url": url, "status": int(response.status), "body": response.read(400).decode(errors="replace")}
    except urllib.error.HTTPError as error:
        return {"url": url, "status": int(error.code)}
    except (urllib.error.URLError, OSError) as error:
        return {"url": url, "status": "error", "error": repr(getattr(error, "reason", error))}


def both_cas() -> ssl.SSLContext:
    """A client context that trusts both servers' CAs, without the host-name check (the wait of serve_all)."""
    context = ssl.create_default_context()
    for cert in NAMES:
        context.load_verify_locations(str(CERTS / cert / "ca.pem"))
    context.check_hostname = False
    return context


def exchange(run: Run, tag: str, port: int, record: Json) -> None:
    url = f"https://127.0.0.1:{port}"
    answers: Json = {}
    for path in ("/health", "/health_generate", "/v1/models"):
        answers[f"GET {path} (CA)"] = http(url + path, timeout=120)
    metrics = http(url + "/metrics", timeout=60)
    answers["GET /metrics (CA)"] = {**metrics, "body": str(metrics.get("body", ""))[:2000]}
    answers["POST /generate (CA)"] = http(
        url + "/generate",
        {"text": "sglang-fleet tls probe:", "sampling_params": {"max_new_tokens": 8, "temperature": 0}},
        timeout=120,
    )
    cert = record["certificate"]
    answers["GET /health (its CA, host name checked)"] = probe(url + "/health", client(cert, check_hostname=True))
    answers["GET /health (system CAs)"] = probe(url + "/health", None)
    answers["GET /health (plain http)"] = probe(f"http://127.0.0.1:{port}/health", None)
    run.save(f"{tag}/tls.json", answers)
    record["answers"] = {name: rec.get("status") for name, rec in answers.items()}
    record["errors"] = {name: rec.get("error") for name, rec in answers.items() if rec.get("error")}
    run.log(f"{tag}: " + "; ".join(f"{name} {status}" for name, status in record["answers"].items()))


def stage_models(run: Run, models: Path, record: Json) -> None:
    sandbox_models(run, models, record, variants={MODEL: ()})


def stage_servers(run: Run, models: Path, record: Json) -> None:
    # driver.http (the wait, the exchanges) trusts both CAs, without the host-name check
    urllib.request.install_opener(urllib.request.build_opener(urllib.request.HTTPSHandler(context=both_cas())))
    launches = {}
    for tag, (port, cert, with_ca) in SERVERS.items():
        flags = ["--ssl-certfile", str(CERTS / cert / "server.pem"), "--ssl-keyfile", str(CERTS / cert / "server.key")]
        flags += ["--ssl-ca-certs", str(CERTS / cert / "ca.pem")] if with_ca else []
        launches[tag] = (
            [*argv_for(models, MODEL, CT129, port), *flags],
            {"model": MODEL, "port": port, "certificate": cert, "certificate_names": NAMES[cert], "ssl_ca_certs": with_ca},
        )
    serve_all(run, launches, record, exchange=exchange, scheme="https")
    for tag in SERVERS:
        log = run.res / tag / "server.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        run.summary["stages"][tag]["tls_lines"] = [
            line
            for line in lines
            if "server_args=" not in line
            and any(word in line for word in ("SSL", "ssl", "https", "Uvicorn", "certificate", "warmup", "Warmup", "Error"))
        ][:40]


def headline(run: Run) -> None:
    run.summary["headline"] = {
        tag: {
            **server_headline(run.summary["stages"].get(tag) or {}),
            "answers": (run.summary["stages"].get(tag) or {}).get("answers"),
            "tls_lines": (run.summary["stages"].get(tag) or {}).get("tls_lines"),
        }
        for tag in SERVERS
    }


def main() -> int:
    if sys.argv[1:] == ["--make-certificates"]:
        make_certificates()
        print(f"certificates in {CERTS}: {sorted(p.name for p in CERTS.iterdir())}")
        return 0
    return run_script("tls_serving", stage_models, stage_servers, headline)


if __name__ == "__main__":
    sys.exit(main())
