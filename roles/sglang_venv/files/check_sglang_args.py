"""Parse an SGLang server command line with SGLang's own parser, without starting a server.

Exits 0 when SGLang accepts the flags and 2 (argparse) when it does not. Preflight runs it with each
instance's rendered flags. Installed into the venv by sglang-fleet.
"""

import sys

from sglang.srt.plugins import load_plugins
from sglang.srt.server_args import prepare_server_args

load_plugins()
prepare_server_args(sys.argv[1:])
