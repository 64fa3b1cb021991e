"""The HTTP side: SGLang 0.5.23's endpoints on a threaded stdlib server.

Paths, methods, status codes and bodies follow ``srt/entrypoints/http_server.py``
and the OpenAI adapters.  ``--api-key`` works like ``srt/utils/auth.py``:
every path needs ``Authorization: Bearer <key>`` except OPTIONS requests and
paths starting with ``/health``, ``/ready`` or ``/metrics`` (0.5.17: ``/health``
or ``/metrics`` only, and no ``/ready`` route).  A CORS preflight is answered
as Starlette's CORSMiddleware answers it, before any route.
"""

from __future__ import annotations

import enum
import hmac
import json
import logging
import socket
import ssl
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import metrics, responses, weights
from .cache_pools import hicache_host_tokens
from .checks import Plan
from .engine import CHAT_REPLY_TOKENS, Engine, Result, count_prompt_tokens
from .facts import SGLANG_VERSION
from .knobs import Knobs
from .reasoning import chat_reasoning

LogAdapter = logging.LoggerAdapter[logging.Logger]
_EXEMPT_PREFIXES = ("/health", "/ready", "/metrics")
# 0.5.17's srt/utils/auth.py decide_request_auth (line 100): `if path.startswith("/health") or
# path.startswith("/metrics")`; it has no /ready route, so /ready without a key is 401 and with it 404
# (tests/recordings/sglang-0.5.17-h200-keyed-routes).
_LEGACY_EXEMPT_PREFIXES = ("/health", "/metrics")
# The releases whose srt/entrypoints/http_server.py registers each route that came or went after 0.5.17,
# read in each release's wheel: /ready (and its key exemption in srt/utils/auth.py) from 0.5.20 on;
# /get_load up to 0.5.20.
READY_SINCE = (0, 5, 20)
GET_LOAD_UNTIL = (0, 5, 20)


def has_ready(version: str) -> bool:
    """Whether SGLang `version` serves /ready (and lets it through without the key)."""
    return responses.version_tuple(version) >= READY_SINCE


def has_get_load(version: str) -> bool:
    """Whether SGLang `version` still serves the deprecated /get_load (sglang-router 0.3.2's load poll)."""
    return responses.version_tuple(version) <= GET_LOAD_UNTIL


# Starlette's CORSMiddleware as srt/entrypoints/http_server.py (0.5.17 line 460) adds it (allow_origins=["*"],
# allow_credentials=True, allow_methods=["*"], allow_headers=["*"]): starlette/middleware/cors.py ALL_METHODS.
_CORS_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "QUERY")
_CORS_VARY = ", ".join(
    [
        "Origin",
        "Access-Control-Request-Method",
        "Access-Control-Request-Headers",
        "Access-Control-Request-Private-Network",
    ]
)


class Status(enum.Enum):
    STARTING = "Starting"
    UP = "Up"
    UNHEALTHY = "UnHealthy"


class BadRequestError(Exception):
    def __init__(self, body: dict[str, Any], status: int = 400) -> None:
        super().__init__(str(body))
        self.body = body
        self.status = status


@dataclass
class App:
    """State shared by all request threads."""

    plan: Plan
    engine: Engine
    knobs: Knobs
    env: Mapping[str, str]
    launch_command: str
    log: LogAdapter
    startup_time: dict[str, Any] = field(default_factory=dict)
    status: Status = Status.STARTING
    gracefully_exit: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    version: str = SGLANG_VERSION
    http_requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    http_responses: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    # A multimodal model whose tokenizer has no chat template and no --chat-template (launcher.py): every
    # chat completion is refused, as real SGLang's warm-up was.
    chat_template_missing: bool = False
    # The latest /update_weights_from_disk's wall time (weight_load_duration_seconds{source="disk"}), and
    # what ends the server when an update kills its scheduler (launcher.py: SGLang's SIGQUIT handler).
    weight_load_seconds: float | None = None
    on_scheduler_crash: Callable[[], None] | None = None

    @property
    def settings(self) -> dict[str, Any]:
        return self.plan.settings

    @property
    def served_model_name(self) -> str:
        return str(self.settings["served_model_name"])

    @property
    def speculative(self) -> bool:
        return self.plan.speculative_algorithm is not None


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _prompt_of_messages(messages: Any) -> str:
    if not isinstance(messages, list) or not messages:
        raise BadRequestError(responses.error_response("messages: a non-empty list is required"))
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise BadRequestError(responses.error_response("messages: each message needs a role"))
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"<|{message['role']}|>{content or ''}")
    return "\n".join(parts)


def _max_tokens(body: Mapping[str, Any], *names: str, default: int | None) -> int | None:
    for name in names:
        value = body.get(name)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise BadRequestError(responses.error_response(f"{name} must be a non-negative integer"))
            return value
    return default


def route_table(version: str, enable_metrics: bool) -> dict[str, dict[str, str]]:
    """The routes the simulator serves as `version`: path -> method -> Handler method name
    (``/v1/models/{model:path}`` is matched by prefix)."""
    routes: dict[str, dict[str, str]] = {
        "/health": {"GET": "health"},
        "/health_generate": {"GET": "health"},
        "/model_info": {"GET": "model_info"},
        "/get_model_info": {"GET": "get_model_info"},
        "/server_info": {"GET": "server_info"},
        "/get_server_info": {"GET": "get_server_info"},
        "/v1/models": {"GET": "models"},
        "/v1/models/{model:path}": {"GET": "model_card"},
        "/generate": {"POST": "generate", "PUT": "generate"},
        "/v1/chat/completions": {"POST": "chat_completions"},
        "/v1/completions": {"POST": "completions"},
        "/v1/loads": {"GET": "loads"},
        "/update_weights_from_disk": {"POST": "update_weights_from_disk"},
    }
    if has_get_load(version):
        routes["/get_load"] = {"GET": "get_load"}  # gone in 0.5.21
    if has_ready(version):
        routes["/ready"] = {"GET": "ready"}  # 0.5.17 has none (recorded: 404 with the key)
    if enable_metrics:
        routes["/metrics"] = {"GET": "metrics"}
    return routes


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as uvicorn (which real SGLang runs) sets on every connection: without it, on a kept-alive
    # connection the second write of an answer waited for the client's delayed ACK (Nagle), ~40 ms a request.
    disable_nagle_algorithm = True
    # Buffered: an answer's status line, headers and body leave in one write (_send and _stream flush).
    wbufsize = 1 << 16
    server_version = "uvicorn"
    sys_version = ""
    app: App  # set on the subclass built by make_server

    # -- plumbing ------------------------------------------------------------

    def version_string(self) -> str:
        return "uvicorn"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # access lines are written by _access_log

    def _endpoint(self) -> str:
        path = self.path.split("?", 1)[0]
        return "/v1/models/{model:path}" if path.startswith("/v1/models/") else path

    def _access_log(self, status: int, counted: bool = True) -> None:
        if counted:
            with self.app.lock:
                self.app.http_requests[(self._endpoint(), self.command)] += 1
                self.app.http_responses[(self._endpoint(), self.command, str(status))] += 1
        excluded = self.app.settings.get("uvicorn_access_log_exclude_prefixes") or []
        if any(self.path.startswith(prefix) for prefix in excluded):
            return
        client = f"{self.client_address[0]}:{self.client_address[1]}"
        phrase = self.responses.get(status, ("",))[0]
        self.app.log.info('INFO:     %s - "%s" %d %s', client, self.requestline, status, phrase)

    def _send(
        self,
        status: int,
        body: bytes = b"",
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
        counted: bool = True,
    ) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()
        self._access_log(status, counted)

    def _send_json(self, status: int, obj: Any) -> None:
        self._send(status, _json_bytes(obj), "application/json")

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        if not raw:
            raise BadRequestError(responses.error_response("Field required: request body"))
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise BadRequestError(responses.error_response(f"JSON decode error: {exc}")) from None

    def _require_json_content_type(self) -> None:
        media_type = (self.headers.get("Content-Type") or "").lower().split(";", 1)[0].strip()
        if media_type != "application/json":
            raise BadRequestError(
                responses.error_response(
                    "[{'loc': ['header', 'content-type'], 'msg': \"Unsupported Media Type: "
                    "Only 'application/json' is allowed\", 'type': 'value_error'}]"
                )
            )

    def _stream(self, chunks: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._access_log(200)
        try:
            for chunk in chunks:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # -- dispatch ------------------------------------------------------------

    def _authorized(self) -> bool:
        settings = self.app.settings
        api_key = settings.get("api_key")
        if not api_key and not settings.get("admin_api_key"):
            return True
        path = self.path.split("?", 1)[0]
        exempt = _EXEMPT_PREFIXES if has_ready(self.app.version) else _LEGACY_EXEMPT_PREFIXES
        if self.command == "OPTIONS" or path.startswith(exempt):
            return True
        if not api_key:
            return True  # only an admin key: normal endpoints stay open
        header = self.headers.get("Authorization") or ""
        parts = header.split(" ", 1)
        return (
            len(parts) == 2 and parts[0].lower() == "bearer" and hmac.compare_digest(parts[1], str(api_key))
        )

    def _routes(self) -> dict[str, dict[str, Callable[[], None]]]:
        table = route_table(self.app.version, bool(self.app.settings.get("enable_metrics")))
        return {
            path: {method: getattr(self, name) for method, name in methods.items()}
            for path, methods in table.items()
            if "{" not in path
        }

    def _dispatch(self) -> None:
        if not self._authorized():
            # Not in sglang:http_requests_total / http_responses_total: the API-key middleware is added after
            # the metrics one (0.5.17 srt/entrypoints/http_server.py line 2489, then add_api_key_middleware at
            # 2517), so it is the outer one and a refused request never reaches the counters (recorded: 3 GETs
            # of /ready, one counted, tests/recordings/sglang-0.5.17-h200-keyed-routes).
            self._send(401, _json_bytes({"error": "Unauthorized"}), "application/json", counted=False)
            return
        path = self.path.split("?", 1)[0]
        routes = self._routes()
        if path.startswith("/v1/models/"):
            routes[path] = {"GET": self.model_card}
        methods = routes.get(path)
        if methods is None:
            self._send_json(404, {"detail": "Not Found"})
            return
        handler = methods.get(self.command)
        if handler is None:
            self._send(
                405,
                _json_bytes({"detail": "Method Not Allowed"}),
                "application/json",
                {"Allow": ", ".join(sorted(methods))},
            )
            return
        try:
            handler()
        except BadRequestError as exc:
            self._send_json(exc.status, exc.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # an internal error must not kill the connection silently
            self.app.log.exception("simulator: error while serving %s", self.path)
            self._send_json(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_OPTIONS(self) -> None:
        if "Origin" in self.headers and "Access-Control-Request-Method" in self.headers:
            self._cors_preflight()
            return
        self._dispatch()

    def _cors_preflight(self) -> None:
        """starlette/middleware/cors.py preflight_response: SGLang's CORSMiddleware answers a preflight
        itself, for any path, and the API-key middleware lets every OPTIONS through (0.5.17
        srt/utils/auth.py line 97: `if method == "OPTIONS": return AuthDecision(allowed=True)`)."""
        headers = {
            "Vary": _CORS_VARY,
            "Access-Control-Allow-Methods": ", ".join(_CORS_METHODS),
            "Access-Control-Max-Age": "600",
            "Access-Control-Allow-Credentials": "true",
            "Access-Control-Allow-Origin": self.headers["Origin"],
        }
        requested = self.headers.get("Access-Control-Request-Headers")
        if requested is not None:
            headers["Access-Control-Allow-Headers"] = requested
        failures = [] if self.headers["Access-Control-Request-Method"] in _CORS_METHODS else ["method"]
        if self.headers.get("Access-Control-Request-Private-Network") is not None:
            failures.append("private-network")
        text = "Disallowed CORS " + ", ".join(failures) if failures else "OK"
        self._send(400 if failures else 200, text.encode(), "text/plain; charset=utf-8", headers)

    # -- health --------------------------------------------------------------

    def health(self) -> None:
        app = self.app
        if app.gracefully_exit or app.status is Status.STARTING:
            self._send(503)
            return
        path = self.path.split("?", 1)[0]
        generation = app.env.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").lower()
        if path == "/health" and generation in ("false", "0", "no", "n"):
            self._send(200)
            return
        timeout = float(app.env.get("SGLANG_HEALTH_CHECK_TIMEOUT") or 20)
        wait = app.knobs.health_seconds
        if wait > timeout:
            time.sleep(timeout)
            app.log.error(
                "Health check failed. Server couldn't get a response from detokenizer for last %d seconds.",
                int(timeout),
            )
            app.status = Status.UNHEALTHY
            self._send(503)
            return
        time.sleep(wait)
        app.status = Status.UP
        self._send(200)

    def ready(self) -> None:
        up = self.app.status is Status.UP and not self.app.gracefully_exit
        self._send(200 if up else 503)

    # -- info ----------------------------------------------------------------

    def model_info(self) -> None:
        self._send_json(200, responses.model_info(self.app.plan))

    def get_model_info(self) -> None:
        self.app.log.warning(
            "Endpoint '/get_model_info' is deprecated and will be removed in a future "
            "version. Please use '/model_info' instead."
        )
        self.model_info()

    def update_weights_from_disk(self) -> None:
        """weights.py: the new revision's weights in place (the draft's too), or the recorded failures."""
        body = self._body()
        if not isinstance(body, dict) or not isinstance(body.get("model_path"), str):
            raise BadRequestError(
                {"detail": [{"type": "missing", "loc": ["body", "model_path"], "msg": "Field required"}]}, 422
            )
        app, started = self.app, time.perf_counter()
        version = body.get("weight_version")
        app.log.info("Start update_weights. Load format=%s", body.get("load_format") or "auto")
        for _ in range(2 if app.speculative else 1):  # the target, then the draft worker (same model_path)
            app.log.info("Update engine weights online from disk begin. avail mem=%.2f GB", 75.97)
            outcome = weights.update_from_disk(body["model_path"], None if version is None else str(version))
            if outcome.status != 200:
                break
            app.log.info("Update weights end.")
        app.weight_load_seconds = time.perf_counter() - started
        if outcome.crash:
            app.log.error("Scheduler hit an exception: Traceback (most recent call last):")
            app.log.error("safetensors._safetensors_rust.SafetensorError: %s", outcome.message)
            app.log.error("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
            if app.on_scheduler_crash is not None:
                app.on_scheduler_crash()  # does not return
            return
        if outcome.status == 200:
            with app.lock:
                app.settings["model_path"] = body["model_path"]
                if version is not None:
                    app.settings["weight_version"] = str(version)
            app.log.info("Cache flushed successfully!")
        else:
            app.log.error("%s", outcome.message)
        self._send_json(outcome.status, {"success": outcome.status == 200, "message": outcome.message,
                                         "num_paused_requests": 0})  # fmt: skip

    def server_info(self) -> None:
        app = self.app
        self._send_json(
            200,
            responses.server_info(
                app.plan,
                launch_command=app.launch_command,
                startup_time=app.startup_time,
                last_gen_throughput=app.engine.gen_throughput(),
                avg_spec_accept_length=app.engine.avg_spec_accept_length(),
                version=app.version,
            ),
        )

    def get_server_info(self) -> None:
        self.app.log.warning(
            "Endpoint '/get_server_info' is deprecated and will be removed in a future "
            "version. Please use '/server_info' instead."
        )
        self.server_info()

    def get_load(self) -> None:
        self.app.log.warning(
            "Endpoint '/get_load' is deprecated and will be removed in a future "
            "version. Please use '/v1/loads' instead."
        )
        c = self.app.engine.snapshot()
        self._send_json(200, responses.get_load(c.running, c.queued))

    def loads(self) -> None:
        c = self.app.engine.snapshot()
        include = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("include", [None])[-1]
        try:
            answer = responses.loads(
                self.app.plan,
                version=self.app.version,
                running=c.running,
                queued=c.queued,
                gen_throughput=c.last_gen_throughput,
                include=include,
            )
        except ValueError:  # raised by to_dict outside the route's try: FastAPI's plain 500
            self._send(500, b"Internal Server Error", "text/plain; charset=utf-8")
            return
        self._send_json(200, answer)

    def models(self) -> None:
        card = responses.model_card(self.app.served_model_name, self.app.plan.context_length)
        self._send_json(200, {"object": "list", "data": [card]})

    def model_card(self) -> None:
        name = self.path.split("?", 1)[0][len("/v1/models/") :]
        if name != self.app.served_model_name:
            self._send_json(
                404,
                {
                    "error": {
                        "message": f"The model '{name}' does not exist",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
            )
            return
        self._send_json(200, responses.model_card(name, self.app.plan.context_length))

    def metrics(self) -> None:
        app, plan = self.app, self.app.plan
        memory = responses.memory_usage(plan)
        with app.lock:
            requests = dict(app.http_requests)
            answered = dict(app.http_responses)
        requests[("/metrics", "GET")] = requests.get(("/metrics", "GET"), 0) + 1
        text = metrics.render(
            app.engine,
            model_name=app.served_model_name,
            max_total_num_tokens=plan.max_total_num_tokens,
            facts=metrics.ServerFacts(
                model_name=app.served_model_name,
                max_total_num_tokens=plan.max_total_num_tokens,
                context_length=plan.context_length,
                weight_gb=float(memory["weight"]),
                kv_cache_gb=float(memory["kvcache"]),
                startup_available_gb=float(memory["startup_available"]),
                speculative_num_steps=int(app.settings.get("speculative_num_steps") or 0),
                speculative_num_draft_tokens=int(app.settings.get("speculative_num_draft_tokens") or 0),
                speculative=app.speculative,
                hicache_host_total_tokens=hicache_host_tokens(
                    app.settings, plan.model, plan.max_total_num_tokens
                ),
                startup_time={k: v for k, v in app.startup_time.items() if isinstance(v, (int, float))},
                weight_load_seconds=app.weight_load_seconds,
                http_requests=requests,
                http_responses=answered,
                http_active={key: int(key == ("/metrics", "GET")) for key in requests},
            ),
        )
        self._send(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")

    # -- generation ----------------------------------------------------------

    def _check_context(self, prompt_tokens: int) -> None:
        context = self.app.plan.context_length
        if prompt_tokens >= context:
            raise BadRequestError(
                {
                    "error": {
                        "message": f"The input ({prompt_tokens} tokens) is longer than the "
                        f"model's context length ({context} tokens)."
                    }
                }
            )

    def _meta(self, result: Result) -> dict[str, Any]:
        return responses.generate_meta_info(
            result,
            weight_version=str(self.app.settings.get("weight_version", "default")),
            num_draft_tokens=self.app.settings.get("speculative_num_draft_tokens"),
            speculative=self.app.speculative,
            version=self.app.version,
        )

    def generate(self) -> None:
        body = self._body()
        if not isinstance(body, dict):
            raise BadRequestError(responses.error_response("Input should be a valid dictionary"))
        text = body.get("text")
        if text is None and body.get("input_ids") is not None:
            text = " ".join(str(i) for i in body["input_ids"])
        if text is None:
            raise BadRequestError(
                {"error": {"message": "Either text, input_ids or input_embeds should be provided."}}
            )
        params = body.get("sampling_params") or {}
        max_new = _max_tokens(params, "max_new_tokens", default=128)
        if isinstance(text, list):
            if body.get("stream"):
                raise BadRequestError({"error": {"message": "The simulator does not stream batches."}})
            outs = []
            for item in text:
                self._check_context(count_prompt_tokens(str(item)))
                result = self.app.engine.run(str(item), max_new)
                outs.append(
                    {"text": result.text, "output_ids": result.output_ids, "meta_info": self._meta(result)}
                )
            self._send_json(200, outs)
            return
        prompt = str(text)
        self._check_context(count_prompt_tokens(prompt))
        rid = body.get("rid") if isinstance(body.get("rid"), str) else None
        if not body.get("stream"):
            result = self.app.engine.run(prompt, max_new, rid=rid)
            self._send_json(
                200, {"text": result.text, "output_ids": result.output_ids, "meta_info": self._meta(result)}
            )
            return
        incremental = bool(self.app.settings.get("incremental_streaming_output"))

        def chunks() -> Iterator[bytes]:
            first = True
            for step, result in self.app.engine.generate(prompt, max_new, stream=True, rid=rid):
                meta = self._meta(result)
                if first:  # real SGLang stamps the first chunk (and the last) with the send time
                    meta.setdefault("response_sent_to_client_ts", time.time())
                    first = False
                out = {
                    "text": step.text if incremental else result.text,
                    "output_ids": step.token_ids if incremental else list(result.output_ids),
                    "meta_info": meta,
                }
                yield b"data: " + _json_bytes(out) + b"\n\n"
            yield b"data: [DONE]\n\n"

        self._stream(chunks())

    def chat_completions(self) -> None:
        self._require_json_content_type()
        body = self._body()
        if not isinstance(body, dict):
            raise BadRequestError(responses.error_response("Input should be a valid dictionary"))
        prompt = _prompt_of_messages(body.get("messages"))
        if self.app.chat_template_missing:
            raise BadRequestError(responses.chat_template_missing())
        prompt_tokens = count_prompt_tokens(prompt)
        self._check_context(prompt_tokens)
        max_new = _max_tokens(body, "max_completion_tokens", "max_tokens", default=None)
        reply_tokens = None if body.get("ignore_eos") is True else CHAT_REPLY_TOKENS
        model = str(body.get("model") or "default")
        created = int(time.time())
        weight_version = str(self.app.settings.get("weight_version", "default"))
        parsed = chat_reasoning(self.app.settings, body)
        engine = self.app.engine
        if not body.get("stream"):
            result = engine.run(prompt, max_new, reply_tokens=reply_tokens)
            self._send_json(
                200,
                responses.chat_completion(
                    result,
                    model=model,
                    created=created,
                    prompt_tokens=prompt_tokens,
                    weight_version=weight_version,
                    version=self.app.version,
                    reasoning_split=parsed.split,
                    reasoning_tokens=parsed.reasoning_tokens(result.completion_tokens),
                ),
            )
            return
        options = body.get("stream_options") or {}
        include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
        held_back = parsed.split and body.get("stream_reasoning") is False  # sent in one piece at the end
        rid = uuid.uuid4().hex

        def text_chunk(text: str) -> bytes:
            if parsed.split:
                return _sse(responses.chat_chunk(rid, model=model, created=created, reasoning_content=text))
            return _sse(responses.chat_chunk(rid, model=model, created=created, content=text))

        def chunks() -> Iterator[bytes]:
            last: Result | None = None
            first = True
            unsent = ""
            steps = engine.generate(prompt, max_new, stream=True, rid=rid, reply_tokens=reply_tokens)
            for step, result in steps:
                if first:
                    first = False
                    yield _sse(
                        responses.chat_chunk(rid, model=model, created=created, role="assistant", content="")
                    )
                unsent += step.text
                if unsent and (not held_back or result.finish_reason is not None):
                    yield text_chunk(unsent)
                    unsent = ""
                last = result
            if last is not None:
                reason, matched = responses.finish(last)
                yield _sse(
                    responses.chat_chunk(
                        rid, model=model, created=created, finish_reason=reason, matched_stop=matched
                    )
                )
                if include_usage:
                    yield _sse(
                        responses.chat_usage_chunk(
                            last,
                            model=model,
                            created=created,
                            prompt_tokens=prompt_tokens,
                            version=self.app.version,
                            reasoning_tokens=parsed.reasoning_tokens(last.completion_tokens),
                        )
                    )
            yield b"data: [DONE]\n\n"

        self._stream(chunks())

    def completions(self) -> None:
        self._require_json_content_type()
        body = self._body()
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), (str, list)):
            raise BadRequestError(responses.error_response("prompt: Field required"))
        prompt_raw = body["prompt"]
        prompt = prompt_raw if isinstance(prompt_raw, str) else " ".join(str(p) for p in prompt_raw)
        prompt_tokens = count_prompt_tokens(prompt)
        self._check_context(prompt_tokens)
        max_new = _max_tokens(body, "max_tokens", default=16)
        model = str(body.get("model") or "default")
        created = int(time.time())
        engine = self.app.engine
        if not body.get("stream"):
            result = engine.run(prompt, max_new)
            weight_version = str(self.app.settings.get("weight_version", "default"))
            self._send_json(
                200,
                responses.completion(
                    result,
                    model=model,
                    created=created,
                    prompt_tokens=prompt_tokens,
                    weight_version=weight_version,
                    version=self.app.version,
                ),
            )
            return
        rid = uuid.uuid4().hex

        def chunks() -> Iterator[bytes]:
            for step, result in engine.generate(prompt, max_new, stream=True, rid=rid):
                reason, matched = responses.finish(result)
                yield _sse(
                    responses.completion_chunk(
                        rid,
                        model=model,
                        created=created,
                        text=step.text,
                        finish_reason=reason,
                        matched_stop=matched,
                    )
                )
            yield b"data: [DONE]\n\n"

        self._stream(chunks())


def _sse(obj: Any) -> bytes:
    return b"data: " + _json_bytes(obj) + b"\n\n"


class SimHTTPServer(ThreadingHTTPServer):
    app: App  # the state its handlers serve (make_server)
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # load tests open many connections at once


class SimHTTPSServer(SimHTTPServer):
    """The server over TLS (SGLang's --ssl-certfile/--ssl-keyfile, which it hands to uvicorn): each
    connection's handshake is made in its own thread; a client that speaks no TLS (plain http) gets no HTTP
    answer, only the connection closed, as uvicorn's TLS transport does."""

    tls: ssl.SSLContext  # set by make_server

    def finish_request(self, request: Any, client_address: Any) -> None:
        if not self._speaks_tls(request):
            return
        try:
            wrapped = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()

    @staticmethod
    def _speaks_tls(request: socket.socket) -> bool:
        """Whether the client's first byte opens a TLS handshake (22). Else (plain http, say) what it sent is
        read, as uvicorn's transport reads it, so that the close is an orderly end, as recorded
        (`RemoteDisconnected('Remote end closed connection without response')`), not a reset."""
        try:
            if request.recv(1, socket.MSG_PEEK) == b"\x16":
                return True
            request.settimeout(0.2)
            while request.recv(65536):
                pass
        except OSError:
            pass
        return False


def uvicorn_tls(settings: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The TLS context uvicorn 0.54.0 builds from the flags SGLang 0.5.17 and 0.5.23 pass it
    (uvicorn.run(..., ssl_keyfile, ssl_certfile, ssl_ca_certs, ssl_keyfile_password); uvicorn/config.py
    create_ssl_context with its defaults: PROTOCOL_TLS_SERVER, CERT_NONE - no client certificate asked, "No
    MTLS supported for now" - and no cipher list); None without a certificate (plain http)."""
    if not settings.get("ssl_certfile"):
        return None
    password = settings.get("ssl_keyfile_password")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    get_password = (lambda: password) if password else None
    context.load_cert_chain(settings["ssl_certfile"], settings.get("ssl_keyfile"), get_password)
    context.verify_mode = ssl.CERT_NONE
    if settings.get("ssl_ca_certs"):
        context.load_verify_locations(settings["ssl_ca_certs"])
    return context


def make_server(app: App, host: str, port: int, tls: ssl.SSLContext | None = None) -> SimHTTPServer:
    handler = type("BoundHandler", (Handler,), {"app": app})
    server_class: type[SimHTTPServer] = SimHTTPSServer if tls else SimHTTPServer
    if ":" in host:
        server_class = type("SimHTTPServer6", (server_class,), {"address_family": socket.AF_INET6})
    server = server_class((host, port), handler)
    server.app = app
    if tls and isinstance(server, SimHTTPSServer):
        server.tls = tls
    return server


__all__ = ["App", "SimHTTPSServer", "SimHTTPServer", "Status", "make_server", "route_table", "uvicorn_tls"]
