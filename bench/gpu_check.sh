#!/usr/bin/env bash
# The GPU checks (tests/gpu), on a machine with an NVIDIA GPU and torch, from the repository root:
#
#     bash bench/gpu_check.sh
#
# The packages that machine lacks (a GPU image has torch, grpcio, pyyaml, pytest, nvidia-ml-py)
# travel as wheels for its Python in .whl/, a folder git ignores (.git/info/exclude): they are
# installed into /opt/det-gpu-site, which goes on PYTHONPATH after the repository (harness/ and the root,
# as `pip install -e .` would give), and its bin/ (nats-server) on PATH.
# The log goes to $OUT/gpu.log when OUT is set, else to ./gpu.log. Exit status: pytest's.
set -uo pipefail
cd "$(dirname "$0")/.."

log="${OUT:-.}/gpu.log"
# Not under /tmp: a process trial gets a private /tmp, where these packages would not be.
site=/opt/det-gpu-site
wheels="${GPU_CHECK_WHEELS:-.whl}"  # a dry run elsewhere may point it at wheels for its Python

{
    echo "== $(date -u +%FT%TZ) $(uname -m), $(python3 --version)"
    nvidia-smi || echo "nvidia-smi: not available"
    if compgen -G "$wheels/*.whl" >/dev/null; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$site" "$wheels"/*.whl || { echo "installing the wheels in $wheels failed"; exit 3; }
    else
        echo "no wheels in $wheels: only what this Python has"
    fi
} 2>&1 | tee "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 3

export PYTHONPATH="$PWD/harness:$PWD:$site${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$site/bin:$PATH"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

python3 - <<'EOF' 2>&1 | tee -a "$log"
import pynvml
import torch

try:
    pynvml.nvmlInit()
except pynvml.NVMLError as error:
    raise SystemExit(f"pynvml: no NVML here ({error}); torch {torch.__version__}, CUDA {torch.version.cuda}")
for index in range(pynvml.nvmlDeviceGetCount()):
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    print(
        f"pynvml: GPU {index} {pynvml.nvmlDeviceGetName(handle)} {pynvml.nvmlDeviceGetUUID(handle)} "
        f"{memory.total / 2**30:.1f} GiB; driver {pynvml.nvmlSystemGetDriverVersion()}; "
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, available: {torch.cuda.is_available()}"
    )
pynvml.nvmlShutdown()
EOF

# Without -x: the four checks are independent, and one run on a lent machine should say how
# each of them fares. --noconftest: tests/conftest.py's session fixtures start nats-server and
# PostgreSQL for the other suites; these tests use none of them.
python3 -m pytest tests/gpu -m gpu -v -rs --noconftest -p no:cacheprovider 2>&1 | tee -a "$log"
exit "${PIPESTATUS[0]}"
