"""Quoting for ExecStart= and EnvironmentFile= lines."""

from __future__ import annotations

import pytest
from systemd import systemd_env_quote, systemd_exec_quote


def test_plain_words_stay_plain() -> None:
    assert systemd_exec_quote(["/opt/v/bin/python", "-m", "sglang.launch_server", "--port", 30000]) == (
        "/opt/v/bin/python -m sglang.launch_server --port 30000"
    )


def test_spaces_quotes_and_expansions_survive() -> None:
    line = systemd_exec_quote(["--chat-template", 'a "b" c', "--api-key", "x$HOME%n", ""])
    assert line == '--chat-template "a \\"b\\" c" --api-key x$$HOME%%n ""'


def test_environment_values() -> None:
    assert systemd_env_quote("0,1") == "0,1"
    assert systemd_env_quote("a b") == '"a b"'
    assert systemd_env_quote('say "hi"') == '"say \\"hi\\""'
    with pytest.raises(ValueError):
        systemd_env_quote("two\nlines")
