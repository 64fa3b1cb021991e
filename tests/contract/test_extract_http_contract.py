"""simulator/tools/extract_http_contract.py reads what a release's source defines: on a small package laid out as
SGLang's, a changed status while starting or a new route changes what it extracts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

TOOL = Path(__file__).resolve().parents[2] / "simulator/tools/extract_http_contract.py"

HTTP_SERVER = """
import os
app = FastAPI()

@app.get("/ready")
async def ready():
    status_code = 200 if _global_state.tokenizer_manager.is_ready() else 503
    return Response(status_code=status_code)

@app.get("/health")
@app.get("/health_generate")
async def health_generate(request):
    if _global_state.tokenizer_manager.gracefully_exit:
        return Response(status_code=503)
    if _global_state.tokenizer_manager.server_status == ServerStatus.Starting:
        return Response(status_code=STARTING)
    while time.time() < tic + 20:
        if ok:
            return Response(status_code=200)
    return Response(status_code=503)

@app.get("/model_info")
async def model_info():
    result = {"model_path": 1, "is_generation": True}
    if spec is not None:
        result["embedding"] = spec
    return result

@app.get("/server_info")
async def server_info():
    return msgspec_to_builtins({**build_server_info(a, b), "version": v})

@app.api_route("/generate", methods=["POST", "PUT"])
async def generate_request(obj):
    pass

@app.get("/get_model_info")
async def get_model_info():
    logger.warning(
        "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
        "Please use '/model_info' instead."
    )
"""
FILES = {
    "sglang/_version.py": "__version__ = version = '9.9.9'\n",
    "sglang/srt/entrypoints/v1_loads.py": "router = APIRouter()\n\n@router.get('/v1/loads')\nasync def loads():\n    pass\n",
    "sglang/srt/entrypoints/elastic_ep.py": "router = APIRouter()\n",
    "sglang/srt/managers/tokenizer_manager.py": (
        "class TokenizerManager:\n"
        "    def is_healthy(self):\n"
        "        return not self.gracefully_exit and self.server_status == ServerStatus.Up\n"
        "    def is_ready(self):\n"
        "        return not self.is_pause and self.is_healthy()\n"
    ),
    "sglang/srt/utils/common.py": (
        'def add_prometheus_middleware(app):\n    route = Mount("/metrics", make_asgi_app())\n\n'
        "def build_server_info(server_args, info):\n    result = server_args.resolved_dict()\n"
        '    result["launch_command"] = server_args.launch_command\n    return result\n'
    ),
    "sglang/srt/utils/auth.py": (
        "def decide_request_auth(method, path):\n"
        '    if method == "OPTIONS":\n        return True\n'
        '    if path.startswith("/health") or path.startswith("/metrics"):\n        return True\n'
    ),
}


def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("extract_http_contract", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["extract_http_contract"] = module
    spec.loader.exec_module(module)
    return module


def package(root: Path, starting: int, extra_route: str = "") -> Path:
    for name, text in {**FILES, "sglang/srt/entrypoints/http_server.py": HTTP_SERVER + extra_route}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text.replace("STARTING", str(starting)))
    return root


@pytest.mark.parametrize("starting", [503, 500])
def test_the_status_while_starting_is_read_from_the_source(tmp_path: Path, starting: int) -> None:
    data: dict[str, Any] = tool().extract(package(tmp_path, starting))
    assert data["sglang_version"] == "9.9.9"
    assert data["health"]["statuses"] == {"starting": starting, "up": 200, "draining": 503}
    assert data["ready"]["statuses"] == {"starting": 503, "up": 200, "draining": 503}


def test_routes_fields_and_warnings_are_read_from_the_source(tmp_path: Path) -> None:
    extra = '\nif os.environ.get("X"):\n    @app.delete("/only_sometimes")\n    async def sometimes():\n        pass\n'
    data: dict[str, Any] = tool().extract(package(tmp_path, 503, extra))
    routes = {route["path"]: route for route in data["routes"]}
    assert set(routes) == {
        "/ready", "/health", "/health_generate", "/model_info", "/server_info", "/generate", "/get_model_info",
        "/v1/loads", "/metrics", "/only_sometimes",
    }  # fmt: skip
    assert routes["/generate"]["methods"] == ["POST", "PUT"]
    assert routes["/only_sometimes"]["conditions"] == ["os.environ.get('X')"]
    assert routes["/metrics"]["conditions"] == ["enable_metrics"]
    assert data["model_info_fields"] == {"always": ["is_generation", "model_path"], "conditional": ["embedding"]}
    assert data["server_info_fields"]["server_info"]["always"] == ["version"]
    assert data["server_info_fields"]["build_server_info"]["always"] == ["launch_command"]
    assert data["deprecated"] == {
        "/get_model_info": "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
        "Please use '/model_info' instead."
    }
    assert data["unguarded"] == {"methods": ["OPTIONS"], "path_prefixes": ["/health", "/metrics"]}
