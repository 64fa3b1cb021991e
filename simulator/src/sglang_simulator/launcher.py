"""``python -m sglang_simulator``: the ``sglang.launch_server`` stand-in.

Phases, as in real SGLang:

1. parse the command line (exit 2 on a bad flag) and resolve the arguments;
2. "load the weights" for ``SGLANG_SIM_LOAD_SECONDS``: GPU memory is held
   (recorded for the nvidia-smi stand-in) but nothing listens yet;
3. listen on --host/--port and "warm up" for ``SGLANG_SIM_WARMUP_SECONDS``:
   /health and /health_generate answer 503;
4. ready until SIGTERM or a rehearsed crash.

Like real SGLang (recorded on 0.5.17, same code path read in 0.5.23), a
server stopped with SIGTERM once it is up, or whose scheduler fails, ends by
SIGKILLing itself (``kill_process_tree``): its exit status is -9.  SIGTERM
(systemd's control-group stop, or a process-group kill) also reaches the
scheduler child, whose death the subprocess watchdog reports as a crash; the
SIGQUIT handler then sleeps 5 s "before crash diagnostics" and kills the tree,
about 6 s after the SIGTERM (``SGLANG_SIM_STOP_SECONDS``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

from . import cache_pools, gpus, logs, rendezvous
from .args import parse_args
from .checks import Plan, place_launch, resolve_launch
from .engine import Engine
from .environment import deprecation_warnings, ignored_warning
from .errors import StartupError
from .facts import Facts, load_facts
from .knobs import KnobError, Knobs
from .model import image_processor_error, tokenizer_files
from .rendezvous import RendezvousError
from .server import App, SimHTTPServer, Status, make_server, uvicorn_tls

LogAdapter = logging.LoggerAdapter[logging.Logger]
_WARMUP_PROMPT = "The capital city of France is"


def _graph_phases(value: float = 0.0) -> dict[str, float]:
    keys = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")
    return dict.fromkeys(keys, value)


def _scheduler_exception(log: LogAdapter, message: str) -> None:
    """``Scheduler hit an exception: <traceback>``; the exception ends the traceback on a line of its own."""
    log.error("Scheduler hit an exception: Traceback (most recent call last):")
    sys.stderr.write(
        '  File "sglang/srt/managers/scheduler.py", in run_scheduler_process\n'
        "    scheduler = Scheduler(\n"
        f"{message}\n"
    )
    sys.stderr.flush()


def _report(log: LogAdapter, exc: StartupError, *, scheduler: bool) -> None:
    if scheduler:
        _scheduler_exception(log, str(exc))
    else:
        log.error("%s", exc)
    for line in exc.details:
        log.error("simulator: %s", line)


def _loopback(host: str) -> str:
    """``server_args.url()``'s host: loopback for a bind to every address, IPv6 bracketed."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _ssl_verify(ca_file: str | None) -> ssl.SSLContext:
    """The client side of ``server_args.ssl_verify()`` for SGLang's requests to itself: the --ssl-ca-certs
    file and the host name checked, or no check at all without one."""
    context = ssl.create_default_context(cafile=ca_file or None)
    if not ca_file:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _tls_refusal(address: str, port: int, ca_file: str | None) -> str:
    """'' when GET /model_info over https passes the client's certificate check (``_ssl_verify``); else the
    certificate error, as ``repr`` shows it."""
    context = _ssl_verify(ca_file)
    try:
        with (
            socket.create_connection((address.strip("[]"), port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=address.strip("[]")),
        ):
            return ""
    except ssl.SSLCertVerificationError as exc:
        return repr(exc)
    except OSError:
        return ""  # not a certificate matter: the warm-up that follows meets it


def _warmup_chat(host: str, port: int, settings: Mapping[str, Any]) -> tuple[int, str]:
    """A multimodal model's warm-up: a chat completion sent to the server itself (real SGLang's carries
    an image as well; the simulator reads none). Its status and body."""
    address = _loopback(host)
    body = {
        "model": settings["served_model_name"],
        "max_tokens": 8,
        "stream": False,
        "temperature": 0.0,
        "messages": [{"role": "user", "content": "Describe the image."}],
    }
    # server_args.url(): https with a certificate; verified with --ssl-ca-certs, else not at all (ssl_verify).
    scheme = "https" if settings.get("ssl_certfile") else "http"
    request = urllib.request.Request(
        f"{scheme}://{address}:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            **({"Authorization": f"Bearer {settings['api_key']}"} if settings.get("api_key") else {}),
        },
    )
    context = _ssl_verify(settings.get("ssl_ca_certs")) if scheme == "https" else None
    try:
        with urllib.request.urlopen(request, timeout=60, context=context) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode(errors="replace")


def _server_args_line(settings: Mapping[str, Any]) -> str:
    """What ``Engine`` logs: the resolved dict, watermark secrets redacted.

    Like real SGLang, the API keys are *not* redacted.
    """
    shown = dict(settings)
    shown["enable_dp_attention"] = int(shown.get("attn_dp_size") or 1) > 1
    for secret in ("watermark_key", "watermark_key_b", "watermark_config"):
        if shown.get(secret) is not None:
            shown[secret] = "<redacted>"
    return f"server_args={shown}"


class Launch:
    """One simulated server process."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], knobs: Knobs, facts: Facts) -> None:
        self.argv = list(argv)
        self.env = env
        self.knobs = knobs
        self.facts = facts
        self.pid = os.getpid()
        self.stop = threading.Event()
        # A peer node's loss (module rendezvous): the scheduler exception this node crashes with.
        self.lost: str | None = None
        self.log = logs.main_logger()
        self.sched_log = logs.main_logger()
        self.server: SimHTTPServer | None = None
        self.load_seconds = 0.0
        self.stop_signal: int | None = None

    # -- helpers -------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_signal = signum
        # Real SGLang's SIGTERM handler (managers/tokenizer_manager.py sigterm_handler) sets
        # gracefully_exit at once: from then on /health and /ready answer 503
        # (tests/contract/test_http_0_5_23.py).
        if signum == signal.SIGTERM and self.server is not None:
            self.server.app.gracefully_exit = True
        self.stop.set()

    def _wait(self, seconds: float | None) -> bool:
        """Sleep up to ``seconds`` (forever if None); True when asked to stop."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if left <= 0:
                return self.stop.is_set()
            if self.stop.wait(left):
                return True

    def _record(self, plan: Plan, used_mib: float) -> None:
        usage = gpus.Usage(
            pid=self.pid,
            gpu_uuids=tuple(dict.fromkeys(g.uuid for g in plan.gpus)),
            used_mib=int(used_mib),
            process_name=plan.process_name,
        )
        try:
            gpus.write_usage(self.knobs.state_dir, usage)
        except OSError as exc:
            self.log.warning("simulator: cannot record GPU usage in %s: %s", self.knobs.state_dir, exc)

    def _cleanup(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        with contextlib.suppress(OSError):
            gpus.remove_usage(self.knobs.state_dir, self.pid)

    def _kill_tree(self) -> int:
        """``kill_process_tree(os.getpid())``: SGLang SIGKILLs its own process tree, itself included."""
        self.log.info(
            "kill_process_tree called: parent_pid=%d, include_parent=True, pid=%d", self.pid, self.pid
        )
        self._cleanup()
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
        return -int(signal.SIGKILL)  # not reached

    def _scheduler_crashed(self) -> None:
        """A running server's scheduler raised (an in-place weight update that could not read its shards):
        SGLang's SIGQUIT handler waits 5 s for crash diagnostics, then kills the tree (recorded, 0.5.17)."""
        self.log.info("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
        time.sleep(5.0)
        self.log.info("No live scheduler processes found; skipping py-spy and CUDA coredump.")
        self._kill_tree()

    def _launch_failed(self) -> int:
        """A scheduler exception while starting: the launch-phase SIGQUIT handler kills the tree."""
        self.log.error("Received sigquit from a child process. It usually means the child failed.")
        return self._kill_tree()

    def _tokenizer_manager_failed(self, message: str) -> int:
        """The main process's tokenizer manager raised while the scheduler loads: the children are
        killed, and the exception ends the process (exit 1)."""
        self.log.info(
            "kill_process_tree called: parent_pid=%d, include_parent=False, pid=%d", self.pid, self.pid
        )
        sys.stderr.write(
            "Traceback (most recent call last):\n"
            '  File "sglang/srt/managers/tokenizer_manager.py", in init_tokenizer_and_processor\n'
            "    _processor = _get_processor_wrapper(server_args)\n"
            f"{message}\n"
        )
        sys.stderr.flush()
        self._cleanup()
        return 1

    def _check_server_args_failed(self, message: str) -> int:
        """``check_server_args`` asserts in ``_launch_subprocesses``: the children are killed, the exception
        ends the process (exit 1; recorded in tests/recordings/sglang-0.5.17-h100-multinode-missing-node/)."""
        self.log.info(
            "kill_process_tree called: parent_pid=%d, include_parent=False, pid=%d", self.pid, self.pid
        )
        sys.stderr.write(
            "Traceback (most recent call last):\n"
            '  File "sglang/srt/server_args.py", in check_server_args\n'
            f"{message}\n"
        )
        sys.stderr.flush()
        return 1

    def _warmup_failed(self, answer: str) -> int:
        """``_execute_server_warmup`` got an answer other than 200: it logs the assertion, kills the tree."""
        self.log.error("Initialization failed. warmup error: Traceback (most recent call last):")
        sys.stderr.write(
            '  File "sglang/srt/entrypoints/http_server.py", in _execute_server_warmup\n'
            '    assert res.status_code == 200, f"{res.text}"\n'
            f"AssertionError: {answer}\n"
        )
        sys.stderr.flush()
        return self._kill_tree()

    def _poll_model_info_over_tls(self, host: str, port: int, settings: Mapping[str, Any]) -> str | None:
        """``_execute_server_warmup``'s wait: up to 120 tries of GET /model_info over https, verified as
        ``ssl_verify()`` says (the --ssl-ca-certs file and the host name, else nothing), each after a pause
        (its 1 s: the warm-up knob). '' once a try passes; the last certificate error when none did
        (tests/recordings/sglang-0.5.17-h100-tls: a certificate that does not name 127.0.0.1 fails 120 s
        later); None when stopped meanwhile."""
        error = ""
        for attempt in range(120):
            if attempt and self._wait(self.knobs.warmup_seconds):
                return None
            error = _tls_refusal(_loopback(host), port, settings.get("ssl_ca_certs"))
            if not error:
                return ""
        return error

    def _warmup_failed_tls(self, host: str, port: int, error: str) -> int:
        """The wait above gave up: requests' SSLError as the traceback's last line; the tree is killed."""
        self.log.error("Initialization failed. warmup error: Traceback (most recent call last):")
        sys.stderr.write(
            '  File "sglang/srt/entrypoints/http_server.py", in _execute_server_warmup\n'
            "requests.exceptions.SSLError: "
            f"HTTPSConnectionPool(host='{_loopback(host).strip('[]')}', port={port}): "
            f"Max retries exceeded with url: /model_info (Caused by SSLError({error}))\n"
        )
        sys.stderr.flush()
        return self._kill_tree()

    def _crash_diagnostics(self) -> None:
        """``dump_requests_before_crash`` of the running phase (py-spy/coredump dumps are on by default)."""
        self.log.info("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
        time.sleep(self.knobs.stop_seconds * 5 / 6)
        self.log.error("No live scheduler processes found; skipping py-spy and CUDA coredump.")

    def _crash(self, message: str, *, running: bool = False) -> int:
        _scheduler_exception(self.sched_log, message)
        if not running:
            return self._launch_failed()
        self.log.error("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        self._crash_diagnostics()
        return self._kill_tree()

    # -- phases --------------------------------------------------------------

    def run(self, parsed: dict[str, Any]) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        try:
            resolved = resolve_launch(parsed, self.knobs, self.facts, self.log)
        except StartupError as exc:
            _report(self.log, exc, scheduler=False)
            return 1
        if rendezvous.indivisible(resolved.settings):
            return self._check_server_args_failed(rendezvous.INDIVISIBLE)
        self.log.info("%s", _server_args_line(resolved.settings))
        multimodal = self.facts.multimodal(resolved.model.architectures)
        tokenizer = tokenizer_files(str(resolved.settings["tokenizer_path"]))
        if multimodal and not tokenizer.has_image_processor:
            return self._tokenizer_manager_failed(image_processor_error(tokenizer.path))
        tp_size = int(resolved.settings.get("tp_size") or 1)
        self.sched_log = logs.scheduler_logger(tp_size)
        try:
            plan = place_launch(resolved, self.knobs, self.env, self.facts, self.sched_log)
        except StartupError as exc:
            _report(self.sched_log, exc, scheduler=True)
            return self._launch_failed()
        node = rendezvous.node_of(plan.settings)
        if node is not None:
            # Every scheduler joins the rendezvous before any weight loads (module rendezvous).
            self.sched_log.info("Init torch distributed begin.")
            try:
                rendezvous.join(node, self.stop.is_set)
            except (RendezvousError, OSError) as exc:
                rendezvous.close(node)
                _scheduler_exception(self.sched_log, str(exc))
                return self._launch_failed()
            if self.stop.is_set():
                rendezvous.close(node)
                return self._shutdown_quietly()
            rendezvous.watch(node, self._peer_lost)
        status = self._load(plan)
        if status is not None:
            return status
        if node is not None and node.rank > 0:
            return self._serve_other_rank(plan, node)
        # Recorded for multimodal models only: a chat template missing refuses every chat completion.
        return self._serve(
            plan,
            multimodal,
            multimodal and not (plan.settings.get("chat_template") or tokenizer.has_chat_template),
        )

    def _load(self, plan: Plan) -> int | None:
        log, knobs = self.sched_log, self.knobs
        start = time.monotonic()
        log.info("Load weight begin. avail mem=%.2f GB", plan.free_mib / 1024)
        self._record(plan, min(plan.free_mib, plan.weights_per_gpu_mib + 512))
        if knobs.hang_loading:
            self._wait(None)
            self._cleanup()
            return 0
        if knobs.fail_at_start:
            if self._wait(knobs.load_seconds / 2):
                self._cleanup()
                return 0
            return self._crash(f"RuntimeError: {knobs.fail_at_start}")
        if self._wait(knobs.load_seconds):
            if self.lost:
                # A peer node went away while the weights loaded: their collectives fail (module rendezvous).
                return self._crash(self.lost)
            self._cleanup()
            return 0
        elapsed = time.monotonic() - start
        if plan.memory_error is not None and "out of memory" in str(plan.memory_error).lower():
            _report(log, plan.memory_error, scheduler=True)  # the weights themselves do not fit
            return self._launch_failed()
        log.info(
            "Load weight end. elapsed=%.2f s, type=%s, avail mem=%.2f GB, mem usage=%.2f GB.",
            elapsed,
            plan.model.architecture,
            (plan.free_mib - plan.weights_per_gpu_mib) / 1024,
            plan.weights_per_gpu_mib / 1024,
        )
        if plan.memory_error is not None:
            # Real SGLang sizes the KV cache right after "Load weight end" and fails there.
            _report(log, plan.memory_error, scheduler=True)
            return self._launch_failed()
        settings, tokens = plan.settings, plan.max_total_num_tokens
        hybrid_lines = cache_pools.kv_cache_lines(settings, plan.model, tokens)
        # Only where the flags size the mamba pool: else SGLang sizes it from a memory profile the simulator
        # does not have, and its lines would contradict the memory model's KV pool.
        if hybrid_lines is None or not cache_pools.mamba_cache_size_given(settings):
            kv_gib = max(0.0, plan.used_mib - 1024 - plan.weights_per_gpu_mib) / 1024
            log.info(
                "KV Cache is allocated. dtype: torch.bfloat16, #tokens: %d, K size: %.2f GB, V size: %.2f GB",
                tokens,
                kv_gib / 2,
                kv_gib / 2,
            )
        else:
            # A hybrid gated-delta-net model: the mamba state pool first (and the request cap it sets), then
            # the target's and the draft's KV pools (recorded in
            # tests/recordings/sglang-0.5.17-h200-tiny-qwen3.5/b200).
            warning = plan.mamba_cap.warning() if plan.mamba_cap else None
            if warning:
                log.warning("%s", warning)
            mamba = cache_pools.mamba_pool_sizes(settings, plan.model, tokens)
            if mamba is not None:
                log.info("%s", mamba.log_line())
            for line in hybrid_lines:
                log.info("%s", line)
        log.info("Memory pool end. avail mem=%.2f GB", (plan.free_mib - plan.used_mib + 1024) / 1024)
        self._record(plan, plan.used_mib)
        log.info(
            "max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, "
            "max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB",
            plan.max_total_num_tokens,
            plan.memory.chunked_prefill_size,
            int(plan.settings.get("max_prefill_tokens") or 16384),
            plan.max_running_requests,
            plan.context_length,
            (plan.free_mib - plan.used_mib) / 1024,
        )
        host_pools = cache_pools.hicache_host_pools(settings, plan.model, tokens)
        for line in host_pools.log_lines() if host_pools else []:
            log.info("%s", line)
        self.load_seconds = elapsed
        return None

    def _serve(self, plan: Plan, multimodal: bool, chat_template_missing: bool) -> int:
        settings = plan.settings
        engine = Engine(
            max_running_requests=plan.max_running_requests,
            token_seconds=self.knobs.token_seconds,
            eos_token_id=plan.model.eos_token_id,
            accept_length=plan.accept_length,
            num_draft_tokens=settings.get("speculative_num_draft_tokens"),
            decode_log_interval=int(settings.get("decode_log_interval") or 40),
            log=self.sched_log,
            cuda_graph=not (
                settings.get("disable_cuda_graph") or settings.get("cuda_graph_backend_decode") == "disabled"
            ),
        )
        app = App(
            plan=plan,
            engine=engine,
            knobs=self.knobs,
            env=self.env,
            launch_command=" ".join(self.argv),
            log=self.log,
            startup_time={
                "load_weight": round(self.load_seconds, 3),
                "kv_cache_allocation": 0.0,
                "scheduler_e2e": round(self.load_seconds, 3),
                "cuda_graph": _graph_phases(),
            },
            version=self.facts.sglang_version,
            chat_template_missing=chat_template_missing,
            on_scheduler_crash=self._scheduler_crashed,
        )
        timings = app.startup_time
        self.log.info(
            "Engine startup timings (s): load_weight=%.2f, kv_cache_allocation=%.2f, scheduler_e2e=%.2f, "
            "cuda_graph={%s}, tokenizer_e2e=%.2f",
            timings["load_weight"],
            timings["kv_cache_allocation"],
            timings["scheduler_e2e"],
            ", ".join(f"{phase}=0.00" for phase in _graph_phases()),
            timings["scheduler_e2e"],
        )
        host, port = str(settings["host"]), int(settings["port"])
        if settings.get("ssl_certfile"):
            self.log.info(
                "SSL enabled: certfile=%s, keyfile=%s", settings["ssl_certfile"], settings.get("ssl_keyfile")
            )
            if not settings.get("ssl_ca_certs") and not settings.get("skip_server_warmup"):
                self.log.warning(  # server_args.ssl_verify(), from the warm-up thread
                    "SSL is enabled but --ssl-ca-certs was not provided. Certificate verification is "
                    "DISABLED for internal health checks. For production deployments, provide --ssl-ca-certs "
                    "or use CA-signed certificates."
                )
        try:
            tls = uvicorn_tls(settings)
        except OSError as exc:  # ssl.SSLError too: a key that is not the certificate's, a wrong password
            self.log.error("%s: %s", type(exc).__name__, exc)
            self._cleanup()
            return 1
        try:
            self.server = make_server(app, host, port, tls)
        except OSError as exc:
            self.log.error(
                "[Errno %s] error while attempting to bind on address (%r, %d): %s",
                exc.errno,
                host,
                port,
                exc.strerror,
            )
            self._cleanup()
            return 1
        self.log.info("INFO:     Started server process [%d]", self.pid)
        self.log.info("INFO:     Waiting for application startup.")
        self.log.info("INFO:     Application startup complete.")
        threading.Thread(target=self.server.serve_forever, name="http", daemon=True).start()
        scheme = "https" if settings.get("ssl_certfile") else "http"
        self.log.info("INFO:     Uvicorn running on %s://%s:%d (Press CTRL+C to quit)", scheme, host, port)
        if not settings.get("skip_server_warmup"):
            if self._wait(self.knobs.warmup_seconds):
                return self._shutdown(app)
            if settings.get("ssl_certfile"):
                refused = self._poll_model_info_over_tls(host, port, settings)
                if refused is None:
                    return self._shutdown(app)
                if refused:
                    return self._warmup_failed_tls(host, port, refused)
            if multimodal and not settings.get("skip_tokenizer_init"):
                status, answer = _warmup_chat(host, port, settings)
                if status != 200:
                    return self._warmup_failed(answer)
            else:
                engine.run(_WARMUP_PROMPT, 8)
        app.status = Status.UP
        self.log.info("The server is fired up and ready to roll!")
        if self.knobs.die_after_seconds is not None:
            if not self._wait(self.knobs.die_after_seconds):
                app.status = Status.UNHEALTHY
                return self._crash(
                    "RuntimeError: simulated crash "
                    f"(SGLANG_SIM_DIE_AFTER_SECONDS={self.knobs.die_after_seconds:g})",
                    running=True,
                )
        else:
            self._wait(None)
        return self._shutdown(app)

    def _peer_lost(self, message: str) -> None:
        """A peer node's connection closed: this node's collectives fail (module rendezvous)."""
        if not self.stop.is_set():
            self.lost = message
            self.stop.set()

    def _shutdown_quietly(self) -> int:
        self._cleanup()
        return 0

    def _serve_other_rank(self, plan: Plan, node: rendezvous.Node) -> int:
        """A node of rank other than 0: its schedulers only, and SGLang's dummy health server on --port."""
        server = rendezvous.dummy_health_server(str(plan.settings["host"]), int(plan.settings["port"]))
        self._wait(None)
        server.shutdown()
        rendezvous.close(node)
        if self.lost:
            return self._crash(self.lost, running=True)
        self._cleanup()
        return 0

    def _shutdown(self, app: App) -> int:
        if self.lost:
            app.status = Status.UNHEALTHY
            return self._crash(self.lost, running=True)
        app.gracefully_exit = True
        if self.stop_signal == signal.SIGTERM:
            # SIGTERM reached the scheduler too: its death looks like a crash to the watchdog.
            self.log.warning(
                "SIGTERM received. signum=None frame=None. Draining requests and shutting down..."
            )
            time.sleep(self.knobs.stop_seconds / 12)
            self.log.error(
                "Subprocess scheduler_0 (pid=%d) crashed with exit code -15. "
                "Triggering SIGQUIT for cleanup...",
                self.pid,
            )
            self.log.error("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
            self._crash_diagnostics()
            return self._kill_tree()
        self.log.info("INFO:     Shutting down")
        self._cleanup()
        self.log.info("INFO:     Finished server process [%d]", self.pid)
        return 0


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if env is None else env
    facts = load_facts()
    try:
        knobs = Knobs.from_env(environ)
    except KnobError as exc:
        print(f"sglang-simulator: {exc}", file=sys.stderr)
        return 1
    parsed = parse_args(args, facts)
    try:
        level = logs.level_from_name(str(parsed["log_level"]))
    except AttributeError as exc:
        print(f"AttributeError: {exc}", file=sys.stderr)
        return 1
    logs.setup(level)
    log = logs.main_logger()
    for line in deprecation_warnings(environ, facts):
        log.warning("%s", line)
    ignored = ignored_warning(environ, facts)
    if ignored:
        log.warning("%s", ignored)
    return Launch(args, environ, knobs, facts).run(parsed)
