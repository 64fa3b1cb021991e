#!/bin/bash
# The real-hardware run, on the lent GPU machine, from the repository root:
#   command: bash tests/hardware/run.sh      carry: [".hardware"]      (built here by `make hardware-bundle`)
#   kind nvidia-h200 (one GPU), or nvidia-h200-x2 for the two-GPU stages tp2 and per_gpu (README.md)
# Unpacks the bundle under /tmp, then tests/hardware/driver.py (or $HW_DRIVER) runs every stage within BUDGET_S seconds of the start
# and leaves $OUT/results.tar.gz (rewritten after every stage), $OUT/caches.tar.gz and $OUT/run.log.
export T0
T0=$(date +%s.%N)
set -u
# Mandatory on these machines: no NVLink multicast anywhere (NCCL, PyTorch symmetric memory, NVSHMEM).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OUT=${OUT:-/tmp/hw-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1

B=/tmp/hw
rm -rf "$B" && mkdir -p "$B/tvm-ffi" "$B/triton"
elapsed() { python3 -c "import time; print(round(time.time() - $T0, 1))"; }
if ! tar -xJf .hardware/site.tar.xz -C "$B"; then
    echo "run.sh: cannot unpack .hardware/site.tar.xz (was .hardware carried? run make hardware-bundle here first)"
    exit 3
fi
if [ -f .hardware/caches.tar.gz ]; then
    tar -xzf .hardware/caches.tar.gz -C "$B" || echo "run.sh: seed caches not unpacked; JIT kernels compile on first use"
fi
echo "run.sh: unpacked after $(elapsed) s: $(du -sh "$B/site" | cut -f1) site, $(du -sh "$B/tvm-ffi" | cut -f1) tvm-ffi cache"

# HW_EXTRA_PYTHONPATH: only for a rehearsal without a GPU (README.md), e.g. the simulator's source.
export PYTHONPATH="$B/site${HW_EXTRA_PYTHONPATH:+:$HW_EXTRA_PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    TVM_FFI_CACHE_DIR="$B/tvm-ffi" TRITON_CACHE_DIR="$B/triton" FLASHINFER_WORKSPACE_BASE="$B" \
    LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
    export CUDA_HOME=/usr/local/cuda PATH="/usr/local/cuda/bin:$PATH"
fi
# HW_DRIVER: another script of this folder to run in the same setting (e.g. tests/hardware/nextn_without_mtp.py).
BUDGET_S=${BUDGET_S:-520} python3 "${HW_DRIVER:-tests/hardware/driver.py}"
rc=$?
echo "run.sh: driver exited $rc after $(elapsed) s; results in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $rc
