"""``GET /v1/loads`` as SGLang 0.5.23's ``LoadSnapshot.to_dict(include)`` writes it
(data/v1_loads-0.5.23.json, extracted from the wheel by simulator/tools/extract_v1_loads.py), asked the way
the SGLang Model Gateway asks it (tests/recordings/smg-1.13.0/answers.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import StartServer

ROOT = Path(__file__).resolve().parents[2]
TABLE = json.loads((ROOT / "simulator/src/sglang_simulator/data/v1_loads-0.5.23.json").read_text())
RECORDED = json.loads((ROOT / "tests/recordings/smg-1.13.0/answers.json").read_text())


def gateway_query() -> str:
    """The /v1/loads query the real gateway sent a worker."""
    [path] = [p for p in RECORDED["worker paths the gateway asked"] if p.startswith("GET /v1/loads")]
    return str(path.split(" ", 1)[1])


def test_the_gateway_asks_only_for_sections_the_release_knows() -> None:
    query = gateway_query()
    assert query.startswith("/v1/loads?include=")
    sections = set(query.split("=", 1)[1].split(","))
    assert sections <= set(TABLE["valid_sections"]), sections - set(TABLE["valid_sections"])


def test_the_release_no_longer_has_get_load() -> None:
    """0.5.23 removed /get_load (sglang-router 0.3.2's load poll); the gateway never asks for it."""
    assert not any("/get_load" in path for path in RECORDED["worker paths the gateway asked"])


@pytest.fixture
def server(start_server: StartServer, model_dir: Path):  # type: ignore[no-untyped-def]
    server = start_server(
        ["--model-path", str(model_dir), "--skip-server-warmup"], SGLANG_SIM_VERSION="0.5.23"
    )
    server.wait_ready()
    return server


def test_the_gateways_query_gets_core_fields_and_the_named_sections(server) -> None:  # type: ignore[no-untyped-def]
    answer = server.get(gateway_query())
    assert answer.status == 200
    [load] = answer.json()["loads"]
    names = dict(map(tuple, TABLE["sections"]))  # field -> include name
    asked = set(gateway_query().split("=", 1)[1].split(","))
    assert [key for key in load if key not in names] == TABLE["core"]
    assert {key for key in load if key in names} == {
        field for field, name in names.items() if name in asked
    } - {
        "speculative",
        "lora",
    }


def test_without_include_every_section_the_rank_has(server) -> None:  # type: ignore[no-untyped-def]
    [load] = server.get("/v1/loads").json()["loads"]
    assert {"memory", "disaggregation", "queues"} <= set(load)
    [core_only] = server.get("/v1/loads?include=core").json()["loads"]
    assert list(core_only) == TABLE["core"]


def test_an_unknown_section_fails_as_to_dict_does(server) -> None:  # type: ignore[no-untyped-def]
    answer = server.get("/v1/loads?include=core,bogus")
    assert (answer.status, answer.body) == (500, b"Internal Server Error")
