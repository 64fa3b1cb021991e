"""Build SGLang 0.5.17's tvm-ffi JIT kernels for sm_90a ahead of time, into TVM_FFI_CACHE_DIR (run by prepare.py).

Needs a Python 3.12 with torch (any build) and nvcc 13; no GPU: the architecture is fixed to 9.0a. The kernels are
the header-only ones this run's models reach on an H200 (bf16, hidden 256, head_dim 64, 2 KV heads, the Triton
attention backend): KV-cache store, RMSNorm, fused add-RMSNorm, QK-norm (Qwen3), SiLU-and-mul, RoPE. A kernel
built with arguments the server does not use is merely unused; one it needs and does not find compiles on the GPU.
Loading a built module may fail here (no driver); the built file stays in the cache.

With arguments, only the kernels at those positions of the list (0-based) are built: several processes can then build
the list in parallel into one cache (tests/hardware/nextn_without_mtp.py does that on the GPU machine).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any


def main() -> int:
    import sglang.kernels.jit.utils.arch as arch
    import torch  # type: ignore[import-not-found, unused-ignore]

    arch._CUDA_ARCH = arch.make_jit_cuda_arch(9, 0)  # 9.0a, what an H200 resolves to; no GPU here
    arch._init_jit_cuda_arch_once = lambda: None
    from sglang.kernels.ops.activation import activation
    from sglang.kernels.ops.attention import rope
    from sglang.kernels.ops.kvcache import kvcache
    from sglang.kernels.ops.layernorm import norm

    bf16 = torch.bfloat16
    kernels: list[tuple[str, Callable[[], Any]]] = [
        ("kvcache 256/256", lambda: kvcache._jit_kvcache_module(256, 256)),
        ("rmsnorm 256 bf16", lambda: norm._jit_rmsnorm_module(256, bf16)),
        ("fused_add_rmsnorm bf16", lambda: norm._jit_fused_add_rmsnorm_module(bf16, False)),
        ("fused_add_rmsnorm bf16 cast", lambda: norm._jit_fused_add_rmsnorm_module(bf16, True)),
        ("qknorm 64 bf16", lambda: norm._jit_qknorm_module(64, bf16)),
        ("activation bf16", lambda: activation.activation_module(bf16)),
        ("rotary_embedding", lambda: rope._jit_rotary_embedding_module()),
        ("fused_rope neox 64 bf16", lambda: rope._jit_fused_rope_module(True, 64, bf16, bf16)),
    ]
    only = {int(arg) for arg in sys.argv[1:]}
    report: dict[str, str] = {}
    for index, (name, build) in enumerate(kernels):
        if only and index not in only:
            continue
        t = time.time()
        try:
            build()
            report[name] = f"built and loaded in {time.time() - t:.0f} s"
        except Exception as error:  # a load failure after the build still leaves the .so
            report[name] = f"{type(error).__name__} after {time.time() - t:.0f} s: {str(error)[:200]}"
        print(f"[prebuild_jit] {name}: {report[name]}", flush=True)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
