"""Stand-in for the get-pip.py script ansible-test's bootstrap downloads, for a machine that reaches PyPI only.

ansible-test creates each sanity test's venv without pip, then runs its cached copy of get-pip.py (fetched from the
Ansible project's own file server, which CI cannot reach) with pip's install options and `pip==<its pin>`.
scripts/galaxy-check.sh puts this file where that copy would be (~/.ansible/test/cache/get_pip_<version>.py): it
bootstraps the Python's own bundled pip (ensurepip, offline) and installs ansible-test's pinned pip from the package
index, as get-pip.py does from the wheel it embeds.
"""

from __future__ import annotations

import subprocess
import sys

# get-pip.py's own options (ansible-test passes both: no setuptools or wheel in its venvs); not pip's.
GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}


def main(arguments: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
    pip_arguments = [argument for argument in arguments if argument not in GET_PIP_ONLY]
    subprocess.run([sys.executable, "-m", "pip", "install", "--upgrade", *pip_arguments], check=True)


if __name__ == "__main__":
    main(sys.argv[1:])
