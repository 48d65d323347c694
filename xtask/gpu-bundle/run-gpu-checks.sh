#!/usr/bin/env bash
# Runs concord's GPU checks on this machine and writes their output under OUT (default ./out):
#  1. the GPU test binary: default config on CUDA vs CPU, BSP and CNN parameters on GPU vs CPU,
#     a GPU slot beyond the visible ones refused, allreduce over NCCL vs the ring, and a one-rank
#     NCCL allreduce of 256 MiB;
#  2. the step time of the VGG-like CNN (configs/gpu-vgg-like.toml) at batch 1, 16, 64 and 256 in
#     real time, two ways: "resident", parameters and gradients on the GPU for the whole run as in
#     a PyTorch loop (one `allreduce` worker over NCCL), and "bsp", a parameter-server worker that
#     uploads the parameters and downloads its gradients each step. The resident step at 64 and
#     256 against PyTorch's on the same network (goal: within 1.5x); PyTorch is timed here, in this
#     run, when python3 has it with CUDA (torch-vgg-like.py), else the H200 figures 3.36, 7.62 ms;
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
# PyTorch's step on this GPU, when python3 has torch with CUDA; else an H200's, measured earlier.
torch_ms=("64 3.36" "256 7.62")
torch_src="H200 reference"
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null &&
    measured=$(python3 "$here/torch-vgg-like.py" 64 256 2>"$out/torch.log") && [ -n "$measured" ]; then
  mapfile -t torch_ms <<<"$measured"
  torch_src="PyTorch $(python3 -c 'import torch; print(torch.__version__)') on this GPU"
fi
echo "reference step times: $torch_src" | tee -a "$out/step-times.txt"
# The step per batch and data plane; the resident one at PyTorch's batches against PyTorch's.
torch_at() { for spec in "${torch_ms[@]}"; do set -- $spec; [ "$1" = "$batch" ] && echo "$2"; done; }
for batch in 1 16 64 256; do
  for plane in resident bsp; do
    run="$out/vgg-like-$plane-b$batch"
    extra=()
    [ $plane = resident ] && extra=(--set 'strategies=["allreduce"]' --set collective=nccl)
    if ! "$here/bin/concord" train --config "$here/configs/gpu-vgg-like.toml" --set batch="$batch" \
        "${extra[@]}" --out "$run" --overwrite >"$run.log" 2>&1; then
      echo "vgg-like $plane batch $batch: the run failed (see $run.log)"; tail -5 "$run.log"; status=1
      continue
    fi
    reference=""
    [ $plane = resident ] && reference=$(torch_at)
    python3 - "$run/metrics.jsonl" "$plane" "$batch" "$reference" <<'PY' | tee -a "$out/step-times.txt" || status=1
import json, statistics, sys
path, plane, batch, torch_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = [json.loads(l) for l in open(path) if l.strip()]
steps = [r["compute_s"][0] * 1e3 for r in rows[10:]]  # after 10 warm-up steps
ms = statistics.median(steps)
line = f"vgg-like CNN {plane:8s} batch {batch:3d}: {ms:6.2f} ms per step (median of {len(steps)})"
ok = True
if torch_ms:
    ratio = ms / float(torch_ms)
    ok = ratio <= 1.5
    line += f", PyTorch {float(torch_ms):.2f} ms, ratio {ratio:.2f} {'OK' if ok else 'MISSED (goal 1.5)'}"
print(line)
sys.exit(0 if ok else 1)
PY
  done
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
