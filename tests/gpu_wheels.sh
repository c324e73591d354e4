#!/usr/bin/env bash
# Fetch the nvidia-ml-py wheels tests/gpu_check.sh installs offline: the oldest release pyproject.toml allows
# and the newest on the index. Into tests/wheels (or $1). Needs a package index, so run it before carrying
# the checkout to a GPU host without network.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/wheels}
python=${PYTHON:-python3}
oldest=$("$python" - "$here/../pyproject.toml" <<'PY'
import re, sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
print(next(re.sub(r"^nvidia-ml-py>=", "", d) for d in deps if d.startswith("nvidia-ml-py>=")))
PY
)
mkdir -p "$out"
for spec in "nvidia-ml-py==$oldest" "nvidia-ml-py"; do
    timeout 300 "$python" -m pip download -q --no-deps --only-binary=:all: -d "$out" "$spec"
done
ls "$out"/nvidia_ml_py-*.whl
