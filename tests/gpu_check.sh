#!/usr/bin/env bash
# Compare `gpufleet-agent --once --json` with nvidia-smi on the same GPUs (run by hand on a GPU host).
#
# Identity fields must match exactly (uuid, name, memory.total); live readings within tolerances, since the
# two tools sample a few hundred milliseconds apart. Prints one table row per GPU and field.
#
# Exit status: 0 all agree, 1 a disagreement or the agent failed, 77 skipped (no nvidia-smi or no GPU).
# Environment: GPUFLEET_AGENT  agent command (default: gpufleet-agent on PATH, else python3 -m gpufleet.agent.main)
#              PYTHON          interpreter for the comparison (default: python3)
set -u -o pipefail

if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_check: skipped: nvidia-smi not found (not a GPU host)"
    exit 77
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: skipped: nvidia-smi finds no usable GPU (driver not loaded?)"
    exit 77
fi

python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
    echo "gpu_check: $python not found (set PYTHON)" >&2
    exit 1
fi
if [[ -n ${GPUFLEET_AGENT:-} ]]; then
    read -r -a agent <<<"$GPUFLEET_AGENT"
elif command -v gpufleet-agent >/dev/null 2>&1; then
    agent=(gpufleet-agent)
else
    agent=("$python" -m gpufleet.agent.main)
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

fields=index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem

# Agent first, nvidia-smi straight after: the live values are then as close in time as they can be.
if ! "${agent[@]}" --once --json </dev/null >"$tmp/agent.json" 2>"$tmp/agent.err"; then
    echo "gpu_check: FAIL: ${agent[*]} --once --json failed:" >&2
    cat "$tmp/agent.err" >&2
    exit 1
fi
if ! nvidia-smi --query-gpu="$fields" --format=csv,noheader,nounits >"$tmp/smi.csv" 2>"$tmp/smi.err"; then
    echo "gpu_check: FAIL: nvidia-smi --query-gpu failed:" >&2
    cat "$tmp/smi.err" >&2
    exit 1
fi

"$python" - "$tmp/agent.json" "$tmp/smi.csv" <<'PY'
"""Match GPUs by index and compare field by field; exit 0 if all agree, 1 otherwise."""
import csv
import json
import sys

MIB = 1 << 20
agent_path, smi_path = sys.argv[1], sys.argv[2]


def frames(text):
    """Every JSON object in the output: JSON lines, or one (possibly pretty-printed) document or list."""
    text = text.strip()
    try:
        doc = json.loads(text)
    except ValueError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return doc if isinstance(doc, list) else [doc]


def snapshot_gpus(objs):
    for obj in objs:
        if isinstance(obj, dict) and obj.get("type") == "snapshot":
            return obj.get("gpus") or []
        if isinstance(obj, dict) and isinstance(obj.get("snapshot"), dict):
            return obj["snapshot"].get("gpus") or []
    sys.exit("gpu_check: FAIL: no snapshot frame in the agent's output")


def number(text):
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]", "[Unknown Error]"


def within(abs_tol, rel_tol=0.0):
    return lambda a, s: abs(a - s) <= max(abs_tol, rel_tol * abs(s))


# (nvidia-smi column, agent field, agent value -> nvidia-smi units, agreement test, kind)
CHECKS = [
    ("uuid", "uuid", str, lambda a, s: a == s, "exact"),
    ("name", "name", str, lambda a, s: a == s, "exact"),
    ("memory.total", "memory_total", lambda b: b // MIB, within(1), "exact"),
    ("memory.used", "memory_used", lambda b: b / MIB, within(512, 0.05), "live"),
    ("utilization.gpu", "util_gpu", float, within(15), "live"),
    ("temperature.gpu", "temperature", float, within(3), "live"),
    ("power.draw", "power_draw", float, within(15, 0.10), "live"),
    ("power.limit", "power_limit", float, within(1), "exact"),
    ("clocks.sm", "clock_sm", float, within(50, 0.15), "live"),
    ("clocks.mem", "clock_mem", float, within(50, 0.15), "live"),
]

with open(agent_path) as f:
    gpus = {g["index"]: g for g in snapshot_gpus(frames(f.read()))}
with open(smi_path, newline="") as f:
    rows = [[c.strip() for c in row] for row in csv.reader(f) if row]

failures = 0
print(f"{'gpu':>3}  {'field':<16} {'kind':<5} {'agent':>24} {'nvidia-smi':>24}  result")
if len(rows) != len(gpus):
    print(f"  GPU count differs: agent {len(gpus)}, nvidia-smi {len(rows)}")
    failures += 1
for row in rows:
    index = int(row[0])
    smi = dict(zip([c[0] for c in CHECKS], row[1:]))
    gpu = gpus.get(index)
    if gpu is None:
        print(f"{index:>3}  missing from the agent's snapshot")
        failures += 1
        continue
    if gpu.get("error"):
        print(f"{index:>3}  agent reports an error: {gpu['error']}")
        failures += 1
        continue
    for column, key, convert, agree, kind in CHECKS:
        raw, value = smi[column], gpu.get(key)
        s = raw if convert is str else number(raw)
        if s is None and value is None:
            result = "both n/a"
        elif s is None or value is None:
            result = "MISSING in " + ("agent" if value is None else "nvidia-smi")
            failures += 1
        else:
            a = convert(value)
            ok = agree(a, s)
            if key == "memory_used" and not ok and gpu.get("memory_reserved") is not None:
                ok = agree(convert(value + gpu["memory_reserved"]), s)  # a driver counting reserved as used
            result = "ok" if ok else "DIFFERS"
            failures += not ok
            value = f"{a:.1f}" if isinstance(a, float) else a
        print(f"{index:>3}  {column:<16} {kind:<5} {str(value):>24} {raw:>24}  {result}")

print(f"gpu_check: {'PASS' if failures == 0 else f'FAIL ({failures} disagreements)'}")
sys.exit(0 if failures == 0 else 1)
PY
