"""Build the bundle that the real-hardware run carries to the GPU machine (`make hardware-bundle`).

Steps, each cached under `.hardware-cache/` so that a second run with everything present takes seconds:

1. download the wheels pinned in tests/hardware/wheels.txt for CPython 3.12 on x86_64 (no dependencies resolved);
2. install them with `pip install --no-deps --target` into one site directory;
3. strip what the run does not need (fa3/flashmla/infllm/sm100 kernels, Rust `_core` servers, xgrammar's static
   library, flashinfer's `data/` sources, tests, benchmarks) and add an inert `IPython.display` (sglang/utils.py
   imports it at module level; nothing on the serving path calls it);
4. build flashinfer's `norm` module ahead of time for sm_90a with flashinfer's own JIT spec and place it where
   flashinfer looks for ahead-of-time modules (`flashinfer/data/aot/norm/norm.so`), since its sources are stripped;
5. pack the site directory into `.hardware/site.tar.xz`; pack `.hardware-cache/seed-caches.tar.gz` (the tvm-ffi and
   Triton caches an earlier GPU run returned as `caches.tar.gz`), when present, and the prebuilt JIT kernels (below)
   into `.hardware/caches.tar.gz`;
6. write `.hardware/manifest.json` and print every size; fail when `.hardware/` exceeds 58 MiB.

SGLang's tvm-ffi JIT kernels need torch to build: with `--jit-python PY` (or HW_JIT_PYTHON), a Python 3.12 with
torch, tests/hardware/prebuild_jit.py builds the ones this run's models are expected to reach, for sm_90a, and
they travel in `.hardware/caches.tar.gz`. Any other kernel compiles on the GPU machine (nvcc 13.0) on first use;
the driver returns the caches it used, and `--seed-caches FILE` (or the file above) carries them next time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BUNDLE = ROOT / ".hardware"
CACHE = ROOT / ".hardware-cache"
LIMIT_BYTES = 58 * 2**20

PLATFORMS = [
    "manylinux_2_34_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
]
TARGET = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:"]
for _p in PLATFORMS:
    TARGET += ["--platform", _p]

# Only to build flashinfer's norm module here; not carried.
BUILD_PINS = ["filelock==3.20.0", "packaging==25.0", "tabulate==0.9.0", "nvidia-cublas==13.1.1.3", "nvidia-curand==10.4.0.35"]

# Paths (relative to the site directory) removed after install. Globs.
STRIP = [
    "sgl_kernel/flash_ops*.so",  # fa3, 1.1 GB; the run uses the triton attention backend
    "sgl_kernel/flashmla_ops*.so",
    "sgl_kernel/infllm_ops*.so",
    "sgl_kernel/sm100",  # Blackwell ops; sm90/common_ops is what an H200 loads
    "sglang/srt/server/_core*.so",  # Rust HTTP server, not the path of `python -m sglang.launch_server`
    "sglang/srt/grpc/_core*.so",
    "sglang/srt/multimodal/_core*.so",  # Rust image preprocessing of one multimodal model
    "zstandard/_cffi*.so",  # zstandard imports its C backend; the cffi one is an alternative
    "sglang/multimodal_gen",
    "sglang/test",
    "sglang/kernels/jit/benchmark",
    "sglang/kernels/ops/moe/trtllm_lora_temp/data",
    "xgrammar/lib",  # static library for C++ users
    "flashinfer/data",  # JIT sources; the one module the run builds (norm) is carried prebuilt
    "bin",
]

IPYTHON_STUB = '''"""Inert stand-in: sglang/utils.py imports IPython.display at module level for notebooks only."""


class HTML:
    def __init__(self, *args: object, **kwargs: object) -> None:
        self.args = args


def display(*args: object, **kwargs: object) -> None:
    return None
'''

FAKE_TORCH = '''"""Just enough of torch for flashinfer's JIT spec to build a module without torch installed."""
import types

__version__ = "2.11.0"
_C = types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True)
version = types.SimpleNamespace(cuda="13.0", hip=None)


class _Cuda:
    @staticmethod
    def device_count() -> int:
        return 0

    @staticmethod
    def is_available() -> bool:
        return False


cuda = _Cuda()


def __getattr__(name: str) -> object:  # classes (torch.Tensor) and dtypes used as dict keys (torch.float16)
    if name.startswith("__"):
        raise AttributeError(name)
    if name[:1].isupper():
        return type(name, (), {})
    return "torch." + name
'''

NORM_BUILD = r'''
import sys, types, importlib, os, pathlib, shutil
site, fake, out = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path[:0] = [fake, site]
for name in ("flashinfer", "flashinfer.jit"):  # skip the package __init__s, which import torch for real
    m = types.ModuleType(name)
    m.__path__ = [os.path.join(site, *name.split("."))]
    sys.modules[name] = m
norm = importlib.import_module("flashinfer.jit.norm")
spec = norm.gen_norm_module()
spec.build(verbose=False)
so = spec.jit_library_path
print("built", so)
pathlib.Path(out).parent.mkdir(parents=True, exist_ok=True)
shutil.copy2(so, out)
'''


def log(msg: str) -> None:
    print(f"[prepare] {msg}", flush=True)


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def read_pins(path: Path) -> list[str]:
    pins = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            if "==" not in line:
                raise SystemExit(f"{path}: not pinned: {line}")
            pins.append(line)
    return pins


def canonical(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def wheel_for(pin: str, wheel_dir: Path) -> Path | None:
    name, version = pin.split("==")
    for whl in wheel_dir.glob("*.whl"):
        parts = whl.name.split("-")
        if canonical(parts[0]) == canonical(name) and parts[1] == version:
            return whl
    return None


def download(pins: list[str], wheel_dir: Path) -> list[Path]:
    wheel_dir.mkdir(parents=True, exist_ok=True)
    missing = [p for p in pins if wheel_for(p, wheel_dir) is None]
    if missing:
        log(f"downloading {len(missing)} wheel(s): {' '.join(missing)}")
        platforms = [*TARGET, "--platform", "any"]
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *platforms, "-d", str(wheel_dir), *missing]
        subprocess.run(cmd, check=True)
    wheels = []
    for pin in pins:
        whl = wheel_for(pin, wheel_dir)
        if whl is None:
            raise SystemExit(f"no wheel for {pin} in {wheel_dir}")
        wheels.append(whl)
    return wheels


def digest(paths: list[Path], extra: str) -> str:
    h = hashlib.sha256(extra.encode())
    for p in sorted(paths):
        h.update(p.name.encode())
        h.update(str(p.stat().st_size).encode())
    return h.hexdigest()[:16]


def install(wheels: list[Path], site: Path) -> None:
    if site.exists():
        shutil.rmtree(site)
    log(f"installing {len(wheels)} wheels into {site}")
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--disable-pip-version-check",
           "--target", str(site), *TARGET, "--platform", "any", *map(str, wheels)]
    subprocess.run(cmd, check=True)


def strip(site: Path) -> int:
    removed = 0
    for pattern in STRIP:
        for path in site.glob(pattern):
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size
            removed += size
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for cache in list(site.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
    stub = site / "IPython"
    if not stub.exists():
        stub.mkdir()
        (stub / "__init__.py").write_text('"""Inert stand-in (see display.py)."""\n')
        (stub / "display.py").write_text(IPYTHON_STUB)
    log(f"stripped {mib(removed)}")
    return removed


def python312() -> str:
    """An interpreter of the GPU machine's minor version, to load tvm-ffi's cp312 build for the norm build."""
    candidates = [os.environ.get("PYTHON312", ""), str(Path.home() / ".pyenv/versions/3.12.1/bin/python3.12"),
                  shutil.which("python3.12") or ""]
    for cand in filter(None, candidates):
        probe = subprocess.run([cand, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
                               capture_output=True, text=True, check=False)
        if probe.stdout.strip() == "True":
            return cand
    raise SystemExit("the flashinfer norm build needs a Python 3.12 here (set PYTHON312=/path/to/python3.12)")


def build_norm(site: Path, wheel_dir: Path, work: Path, out: Path) -> None:
    """flashinfer's norm module for sm_90a, with flashinfer's own JIT spec, into `out` (cached)."""
    if out.exists():
        log(f"norm.so cached: {out}")
        return
    src = work / "flashinfer-src"  # the unstripped package: the JIT spec needs data/csrc and data/include
    if src.exists():
        shutil.rmtree(src)
    fi = wheel_for(next(p for p in read_pins(HERE / "wheels.txt") if p.startswith("flashinfer-python==")), wheel_dir)
    tvm = wheel_for(next(p for p in read_pins(HERE / "wheels.txt") if p.startswith("apache-tvm-ffi==")), wheel_dir)
    assert fi is not None and tvm is not None
    tools = work / "norm-tools"
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--disable-pip-version-check",
           "--target", str(src), *TARGET, "--platform", "any", str(fi), str(tvm)]
    subprocess.run(cmd, check=True)
    tools.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(tools / "whl"), *BUILD_PINS],
                   check=True)
    for whl in (tools / "whl").glob("*.whl"):
        if whl.name.startswith("nvidia_"):  # headers only: norm.cuh includes cublasLt.h and curand_kernel.h
            with zipfile.ZipFile(whl) as z:
                z.extractall(tools / "cuda-headers", [m for m in z.namelist() if "/include/" in m])
        else:
            shutil.unpack_archive(str(whl), str(tools / "site"), "zip")
    shutil.unpack_archive(str(wheel_dir / next(w.name for w in wheel_dir.glob("typing_extensions-*.whl"))),
                          str(tools / "site"), "zip")
    includes = [str(p) for p in (tools / "cuda-headers").glob("nvidia/*/include")]
    # The link names -lcuda; this machine has no driver, so an empty libcuda.so.1 satisfies the linker (the real
    # driver library provides the symbols on the GPU machine).
    stub = tools / "libcuda-stub"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "empty.c").write_text("\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(stub / "libcuda.so"), str(stub / "empty.c")],
                   check=True)
    fake = tools / "fake"
    (fake / "torch").mkdir(parents=True, exist_ok=True)
    (fake / "torch" / "__init__.py").write_text(FAKE_TORCH)
    env = dict(os.environ)
    cuda_home = env.get("CUDA_HOME") or "/usr/local/cuda"
    env.update({
        "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
        "FLASHINFER_WORKSPACE_BASE": str(work / "flashinfer-ws"),
        "CUDA_HOME": cuda_home,
        "PATH": f"{cuda_home}/bin:{env.get('PATH', '')}",
        "PYTHONPATH": str(tools / "site"),
        "MAX_JOBS": str(os.cpu_count() or 2),
        "CPATH": ":".join([*includes, env.get("CPATH", "")]).rstrip(":"),
        "LIBRARY_PATH": ":".join([str(stub), env.get("LIBRARY_PATH", "")]).rstrip(":"),
    })
    log("building flashinfer norm for sm_90a (a few minutes on 2 cores)")
    t = time.time()
    subprocess.run([python312(), "-c", NORM_BUILD, str(src), str(fake), str(out)], check=True, env=env)
    log(f"norm.so built in {time.time() - t:.0f} s: {mib(out.stat().st_size)}")


def prebuild_jit(python: str, site: Path, cache: Path) -> None:
    """tests/hardware/prebuild_jit.py with `python` (3.12 with torch) over the site directory, into `cache`."""
    stamp = cache / ".built"
    if stamp.exists():
        log(f"JIT kernels cached: {cache}")
        return
    env = dict(os.environ)
    cuda_home = env.get("CUDA_HOME") or "/usr/local/cuda"
    env.update({"PYTHONPATH": str(site), "TVM_FFI_CACHE_DIR": str(cache), "CUDA_HOME": cuda_home,
                "PATH": f"{cuda_home}/bin:{env.get('PATH', '')}"})
    log(f"prebuilding SGLang's JIT kernels for sm_90a with {python} (about 15 s each)")
    subprocess.run([python, str(HERE / "prebuild_jit.py")], check=True, env=env)
    stamp.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def pack_caches(seed: Path | None, jit: Path | None, dest: Path) -> bool:
    """The seed caches (an earlier run's caches.tar.gz) overlaid with the prebuilt JIT kernels, as one tar.gz."""
    work = CACHE / "caches-work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if seed is not None and seed.exists():
        with tarfile.open(seed) as tf:
            tf.extractall(work, filter="data")
    if jit is not None and jit.exists():
        shutil.copytree(jit, work / "tvm-ffi", dirs_exist_ok=True)
    if not any(work.rglob("*.so")) and not any((work / "triton").rglob("*")):
        return False
    skip = (".o", ".o.d", ".lock", ".ninja_log", ".ninja_deps", ".built")
    tmp = dest.with_suffix(".part")
    with tarfile.open(tmp, "w:gz") as tf:
        for top in sorted(work.iterdir()):
            tf.add(top, arcname=top.name, filter=lambda ti: None if ti.name.endswith(skip) else ti)
    os.replace(tmp, dest)
    return True


def pack(site: Path, dest: Path) -> None:
    tmp = dest.with_suffix(".part")
    log(f"packing {site.name} -> {dest.name} (xz)")
    cmd = ["tar", "--sort=name", "--owner=0", "--group=0", "--numeric-owner", "-I", "xz -T0 -9",
           "-cf", str(tmp), "-C", str(site.parent), site.name]
    subprocess.run(cmd, check=True)
    os.replace(tmp, dest)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed-caches", type=Path, default=CACHE / "seed-caches.tar.gz",
                    help="caches.tar.gz returned by an earlier GPU run (tvm-ffi JIT and Triton caches)")
    ap.add_argument("--force", action="store_true", help="rebuild the site directory and its archive")
    ap.add_argument("--jit-python", default="",
                    help="a Python 3.12 with torch to prebuild SGLang's JIT kernels for sm_90a (or HW_JIT_PYTHON)")
    args = ap.parse_args()

    t0 = time.time()
    pins = read_pins(HERE / "wheels.txt")
    wheel_dir = CACHE / "wheels"
    wheels = download(pins, wheel_dir)
    BUNDLE.mkdir(exist_ok=True)
    site = CACHE / "site"
    norm = CACHE / "norm" / "norm.so"
    key = digest(wheels, json.dumps(STRIP) + IPYTHON_STUB + NORM_BUILD)  # what the site directory is made of
    stamp = CACHE / "site.key"
    archive = BUNDLE / "site.tar.xz"
    if args.force or not archive.exists() or not stamp.exists() or stamp.read_text() != key:
        install(wheels, site)
        strip(site)
        build_norm(site, wheel_dir, CACHE, norm)
        aot = site / "flashinfer" / "data" / "aot" / "norm"
        aot.mkdir(parents=True, exist_ok=True)
        shutil.copy2(norm, aot / "norm.so")
        pack(site, archive)
        stamp.write_text(key)
    else:
        log("site.tar.xz is up to date")

    jit_python = args.jit_python or os.environ.get("HW_JIT_PYTHON", "")
    jit_cache = CACHE / "jit" / key
    if jit_python:
        prebuild_jit(jit_python, site, jit_cache)
    elif not jit_cache.exists():
        log("no --jit-python (a Python 3.12 with torch): SGLang's JIT kernels will compile on the GPU machine")
    caches = BUNDLE / "caches.tar.gz"
    seed = args.seed_caches if args.seed_caches.exists() else None
    if seed is not None:
        log(f"seed caches: {seed}")
    if not pack_caches(seed, jit_cache if jit_cache.exists() else None, caches) and caches.exists():
        caches.unlink()

    files = sorted(p for p in BUNDLE.iterdir() if p.is_file() and p.name != "manifest.json")
    manifest = {
        "wheels": pins,
        "files": {p.name: p.stat().st_size for p in files},
        "site_key": key,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (BUNDLE / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    total = sum(p.stat().st_size for p in BUNDLE.rglob("*") if p.is_file())
    for p in sorted(BUNDLE.rglob("*")):
        if p.is_file():
            log(f"  {p.relative_to(ROOT)}  {mib(p.stat().st_size)}")
    log(f"total .hardware/: {mib(total)} (limit {mib(LIMIT_BYTES)}); {time.time() - t0:.0f} s")
    if total > LIMIT_BYTES:
        log("TOO LARGE: the working tree plus carried paths must stay under 64 MiB")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
