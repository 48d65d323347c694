#!/usr/bin/env bash
# Runs concord's GPU checks on this machine and writes their output under OUT (default ./out):
#  1. the GPU test binary: default config on CUDA vs CPU, BSP and CNN parameters on GPU vs CPU,
#     a GPU slot beyond the visible ones refused, allreduce over NCCL vs the ring, and a one-rank
#     NCCL allreduce of 256 MiB;
#  2. the step time of the VGG-like CNN (configs/gpu-vgg-like.toml) at batch 64 and 256 in real
#     time, beside PyTorch's on an H200 (3.36 and 7.62 ms; goal: within 1.5x);
#  3. allreduce over NCCL across processes (`concord launch`), two where two GPUs are visible.
# Exit status: non-zero if a check failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$("$here/cuda-libs.sh")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/gpu.txt"
status=0
"$here/bin/gpu-checks" --test-threads=1 --nocapture 2>&1 | tee "$out/gpu-checks.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
for spec in "64 3.36" "256 7.62"; do
  set -- $spec
  run="$out/vgg-like-b$1"
  if ! "$here/bin/concord" train --config "$here/configs/gpu-vgg-like.toml" --set batch="$1" \
      --set 'trace="full"' --out "$run" --overwrite >"$run.log" 2>&1; then
    echo "vgg-like batch $1: the run failed (see $run.log)"; tail -5 "$run.log"; status=1; continue
  fi
  python3 - "$run/metrics.jsonl" "$1" "$2" <<'PY' | tee -a "$out/step-times.txt" || status=1
import json, statistics, sys
path, batch, torch_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rows = [json.loads(l) for l in open(path) if l.strip()]
steps = [r["compute_s"][0] * 1e3 for r in rows[10:]]  # after 10 warm-up steps
ms = statistics.median(steps)
ratio = ms / torch_ms
print(f"vgg-like CNN batch {batch}: {ms:.2f} ms per step (median of {len(steps)}), "
      f"PyTorch {torch_ms} ms, ratio {ratio:.2f} {'OK' if ratio <= 1.5 else 'MISSED (goal 1.5)'}")
sys.exit(0 if ratio <= 1.5 else 1)
PY
done
# The step against the batch: a fixed cost per step beside the per-sample one.
for b in 1 16; do
  "$here/bin/concord" train --config "$here/configs/gpu-vgg-like.toml" --set batch="$b" \
      --set iterations=25 --set eval_every=25 --out "$out/vgg-like-b$b" --overwrite >/dev/null 2>&1 &&
  python3 - "$out/vgg-like-b$b/metrics.jsonl" "$b" <<'PY' | tee -a "$out/step-times.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"vgg-like CNN batch {sys.argv[2]}: {statistics.median(r['compute_s'][0] * 1e3 for r in rows[10:]):.2f} ms per step")
PY
done
# NCCL across processes (`--runtime process`): one process per machine, the communicator's id over
# the TCP mesh, each process on the GPU its local rank gives it. Two processes where two GPUs are
# visible (NCCL takes one GPU per rank), else one.
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
np=$(( ngpu >= 2 ? 2 : 1 ))
run="$out/nccl-process-$np"
if "$here/bin/concord" launch --nproc "$np" train --config "$here/configs/gpu-vgg-like.toml" \
    --set workers="$np" --set 'strategies=["allreduce"]' --set collective=nccl \
    --set iterations=20 --set eval_every=20 --out "$run" --overwrite >"$run.log" 2>&1; then
  echo "NCCL across $np process(es): trained; $(grep -i 'accuracy' "$run.log" | tail -1)" | tee -a "$out/step-times.txt"
else
  echo "NCCL across $np process(es): FAILED (see $run.log)" | tee -a "$out/step-times.txt"
  tail -5 "$run.log"; status=1
fi
echo "GPU checks: $([ $status -eq 0 ] && echo all passed || echo some FAILED); output in $out"
exit $status
