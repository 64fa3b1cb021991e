"""SGLang simulator: a stand-in for ``python -m sglang.launch_server`` 0.5.23.

A rehearsal and test tool.  It parses the same command line as the pinned
SGLang release, fails at startup the way it does, and speaks the same HTTP
endpoints, but it serves fake text from no GPU.  Never use it for real traffic.
"""

__version__ = "0.1.0"
