#!/usr/bin/env python3
"""Record how the real SGLang parser treats a set of command lines.

    /opt/sglang-probe/bin/python simulator/tools/record_parser_golden.py          # 0.5.23
    /opt/sglang-0.5.17-probe/bin/python simulator/tools/record_parser_golden.py   # 0.5.17

Writes ``tests/simulator/data/parser_golden-<version>.json`` for the installed
SGLang version: for every case the exit
code (0, or 2 from argparse), the last line argparse printed on an error, and
on success the parsed namespace (stored as its difference from ``defaults``,
the namespace of ``--model-path /models/m``).  The simulator's tests replay the same
command lines through the simulator's parser and must get the same answers,
so this file is what "flag parsing parity" is checked against.  Deterministic.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

# The product's extraction tool says how SGLang's parsed values become JSON (sets, enums, tuples).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from extract_sglang_facts import jsonable

CT129 = [
    "--model-path", "/models/ct129", "--tp-size", "2",
    "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2",
    "--dtype", "bfloat16", "--trust-remote-code", "--port", "30000",
    "--host", "127.0.0.1", "--nccl-port", "31000",
]  # fmt: skip
B200 = [
    "--model-path", "/models/b200",
    "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    "--mamba-radix-cache-strategy", "extra_buffer", "--mem-fraction-static", "0.90",
    "--max-running-requests", "512", "--context-length", "8192",
    "--enable-hierarchical-cache", "--hicache-size", "80",
    "--cuda-graph-max-bs-decode", "512", "--reasoning-parser", "qwen3",
    "--tool-call-parser", "qwen3_coder", "--trust-remote-code",
]  # fmt: skip
M = ["--model-path", "/models/m"]

# (name, argv). Names are stable identifiers for the tests.
CASES: list[tuple[str, list[str]]] = [
    ("no_args", []),
    ("minimal", M),
    ("alias_model", ["--model", "/models/m"]),
    ("equals_form", ["--model-path=/models/m", "--port=31000"]),
    ("ct129", CT129),
    ("b200", B200),
    ("renamed_cuda_graph_max_bs", [*M, "--cuda-graph-max-bs", "512"]),
    ("renamed_cuda_graph_bs", [*M, "--cuda-graph-bs", "1", "2"]),
    ("renamed_mamba_strategy", [*M, "--mamba-scheduler-strategy", "extra_buffer"]),
    ("removed_collect_tokens_histogram", [*M, "--collect-tokens-histogram"]),
    ("unknown_flag", [*M, "--no-such-flag"]),
    ("unknown_positional", [*M, "stray"]),
    ("prefix_tp", [*M, "--tp", "2"]),
    ("prefix_speculative_algo", [*M, "--speculative-algo", "NEXTN"]),
    ("ambiguous_enable", [*M, "--enable"]),
    ("ambiguous_speculative", [*M, "--speculative", "3"]),
    ("bad_choice_dtype", [*M, "--dtype", "bf16"]),
    ("bad_choice_reasoning", [*M, "--reasoning-parser", "qwen4"]),
    ("bad_int_port", [*M, "--port", "abc"]),
    ("bad_float_mem", [*M, "--mem-fraction-static", "lots"]),
    ("missing_value", [*M, "--port"]),
    ("human_int_k", [*M, "--context-length", "32k"]),
    ("human_int_ki", [*M, "--context-length", "128Ki"]),
    ("human_int_bad", [*M, "--context-length", "1.5Ki"]),
    ("human_int_garbage", [*M, "--context-length", "many"]),
    ("json_ok", [*M, "--preferred-sampling-params", '{"temperature": 0.6}']),
    ("json_bad", [*M, "--preferred-sampling-params", "{bad"]),
    ("json_str_flag_not_validated", [*M, "--json-model-override-args", "{bad"]),
    ("json_list_ok", [*M, "--forward-hooks", '[{"name": "h"}]']),
    ("json_list_bad", [*M, "--forward-hooks", "[nope"]),
    ("cuda_graph_config_ok", [*M, "--cuda-graph-config", '{"decode": {"max_bs": 8}}']),
    ("cuda_graph_config_phase", [*M, "--cuda-graph-config", '{"verify": {}}']),
    ("cuda_graph_config_key", [*M, "--cuda-graph-config", '{"decode": {"foo": 1}}']),
    ("cuda_graph_backend_retired", [*M, "--cuda-graph-backend-decode", "tc_piecewise"]),
    ("cuda_graph_backend_ok", [*M, "--cuda-graph-backend-prefill", "breakable"]),
    ("deprecated_dp_attention", [*M, "--enable-dp-attention"]),
    ("deprecated_disable_cuda_graph", [*M, "--disable-cuda-graph"]),
    ("deprecated_monokernel", [*M, "--monokernel-backend", "amd"]),
    ("boolean_optional_no", [*M, "--no-enable-tf32-matmul"]),
    ("boolean_optional_yes", [*M, "--enable-tf32-matmul"]),
    ("lora_paths", [*M, "--lora-paths", "a=/x", '{"lora_name": "b", "lora_path": "/y"}']),
    ("repeated_last_wins", [*M, "--tp-size", "2", "--tp-size", "4"]),
    ("plugin_metrics_port", [*M, "--metrics-port", "9400"]),
    ("log_level_free_text", [*M, "--log-level", "verbose"]),
    ("nargs_plus", [*M, "--cuda-graph-bs-decode", "1", "2", "4"]),
    ("nargs_optional_const", [*M, "--model-checksum"]),
    ("api_key", [*M, "--api-key", "sk-test", "--enable-metrics"]),
    ("nullable_str_none", [*M, "--quantization-param-path", "None"]),
    ("nullable_str_value", [*M, "--quantization-param-path", "/q.json"]),
    ("config_flag_parsed_alone", [*M, "--config=/nonexistent.yaml"]),
]


def main() -> int:
    warnings.simplefilter("ignore")
    from sglang.srt.plugins import load_plugins

    load_plugins()
    from sglang.srt.server_args import ServerArgs

    logging.disable(logging.NOTSET)
    results: list[dict[str, Any]] = []
    for name, argv in CASES:
        parser = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(parser)
        err = io.StringIO()
        code = 0
        parsed: dict[str, Any] | None = None
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                ns = parser.parse_args(argv)
                parsed = {k: jsonable(v) for k, v in sorted(vars(ns).items())}
            except SystemExit as exc:
                code = int(exc.code or 0)
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        results.append(
            {
                "name": name,
                "argv": argv,
                "exit_code": code,
                "error": lines[-1] if code else None,
                "warnings": [] if code else lines,
                "parsed": parsed,
            }
        )
    import sglang

    # Store each namespace as its difference from the defaults, to keep the file small.
    defaults: dict[str, Any] = next(r["parsed"] for r in results if r["name"] == "minimal")
    for r in results:
        if r["parsed"] is not None:
            assert set(r["parsed"]) == set(defaults), r["name"]
            r["parsed"] = {k: v for k, v in r["parsed"].items() if v != defaults[k]}
    out = Path(__file__).resolve().parents[2] / "tests" / "simulator" / "data"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"parser_golden-{sglang.__version__}.json"
    doc = {
        "sglang_version": sglang.__version__,
        "python": ".".join(map(str, sys.version_info[:2])),
        "defaults": defaults,
        "cases": results,
    }
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}: {len(results)} cases", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
