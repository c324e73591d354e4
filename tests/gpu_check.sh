#!/usr/bin/env bash
# The real-GPU acceptance of gpufleet-agent (tests/gpucheck/run.py says what it checks): one PASS/FAIL/SKIP
# line per check and a summary line, in under 5 minutes. Run it on a GPU host from this checkout; nothing
# needs installing: the agent runs from the checkout, nvidia-ml-py (the oldest and the newest release the
# project supports) comes from the wheels in tests/wheels, which tests/gpu_wheels.sh fetches wherever there
# is a package index (copy the folder along to a GPU host without network), or from $GPU_CHECK_WHEELS.
#
# Exit status: 0 every check passed or was skipped, 1 a check failed, 77 no GPU here (skipped).
# Environment: PYTHON (default python3), GPU_CHECK_WHEELS (default tests/wheels).
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
    echo "gpu_check: $python not found (set PYTHON)" >&2
    exit 1
fi
exec timeout --kill-after=10 290 "$python" "$here/gpucheck/run.py" --wheels "${GPU_CHECK_WHEELS:-$here/wheels}" "$@"
