"""``nvidia-modprobe`` stand-in of test hosts: creates the NVIDIA device nodes the real one creates.

The real tool (setuid root) loads the kernel modules and creates ``/dev/nvidia<N>`` and ``/dev/nvidiactl``
(``-c=N``) and, with ``-u``, ``/dev/nvidia-uvm`` and ``/dev/nvidia-uvm-tools``. A test host has no driver:
the stand-in makes character nodes with the driver's numbers (major 195 for the GPUs and the control node;
the uvm major is assigned at module load on a real host, 511 here), which systemd's device policy governs
like real ones (opening an allowed node fails with ENXIO, a refused one with EPERM).

    nvidia-modprobe [-u] [-c=N | --create-nvidia-device-file=N] ...
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Sequence

NVIDIA_MAJOR = 195
CONTROL_MINOR = 255
UVM_MAJOR = 511


def make_node(path: str, major: int, minor: int) -> None:
    """A character node with the given numbers, mode 0666 as the driver's are; an existing node is kept."""
    if not os.path.exists(path):
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(path, 0o666)


def nodes(args: Sequence[str], device_dir: str = "/dev") -> list[tuple[str, int, int]]:
    """The nodes a command line asks for, as (path, major, minor)."""
    wanted: list[tuple[str, int, int]] = []
    minors = [arg.split("=", 1)[1] for arg in args if arg.startswith(("-c=", "--create-nvidia-device-file="))]
    for minor in minors:
        wanted += [(f"{device_dir}/nvidia{int(minor)}", NVIDIA_MAJOR, int(minor))]
    if minors or "-u" in args or "--unified-memory" in args:
        wanted.append((f"{device_dir}/nvidiactl", NVIDIA_MAJOR, CONTROL_MINOR))
    if "-u" in args or "--unified-memory" in args:
        wanted += [
            (f"{device_dir}/nvidia-uvm", UVM_MAJOR, 0),
            (f"{device_dir}/nvidia-uvm-tools", UVM_MAJOR, 1),
        ]
    return wanted


def main(argv: Sequence[str] | None = None) -> int:
    for path, major, minor in nodes(list(sys.argv[1:] if argv is None else argv)):
        make_node(path, major, minor)
    return 0


if __name__ == "__main__":
    sys.exit(main())
