"""sglang_host_facts: parsing nvidia-smi and /proc."""

from __future__ import annotations

from pathlib import Path

import sglang_host_facts as module


def test_parse_gpus() -> None:
    text = "0, GPU-a, NVIDIA B200, 183359, 1, 580.95.05, 0\n1, GPU-b, NVIDIA B200, 183359, 0, 580.95.05, [N/A]\n"
    gpus = module.parse_gpus(text)
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0] == {
        "index": 0,
        "uuid": "GPU-a",
        "name": "NVIDIA B200",
        "memory_total_mib": 183359,
        "memory_used_mib": 1,
        "driver_version": "580.95.05",
        "minor_number": 0,
    }
    assert gpus[1]["minor_number"] is None


def test_parse_listening_keeps_listen_sockets_only() -> None:
    tcp = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n"
        "   1: 0100007F:7531 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n"
    )
    assert module.parse_listening([tcp]) == {30000: 111}


def test_unit_of_reads_the_service_from_the_cgroup(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text("0::/system.slice/sglang-30003.service\n")
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "cgroup").write_text("1:name=systemd:/user.slice/session-1.scope\n")
    assert module.unit_of(42, str(tmp_path)) == "sglang-30003.service"
    assert module.unit_of(43, str(tmp_path)) is None
    assert module.unit_of(44, str(tmp_path)) is None
