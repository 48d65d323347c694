#!/usr/bin/env bash
# Prints a library path (colon-separated) holding the CUDA 13 libraries a concord cuda build loads at
# start-up, found on this machine: Python CUDA wheels (a PyTorch cu130 install has them under
# site-packages/nvidia/*/lib), a CUDA toolkit, and the driver's libcuda.so.1. Names any it misses on
# stderr. Usage: export LD_LIBRARY_PATH="$(./cuda-libs.sh)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
set -uo pipefail
dirs=()
add() { [ -d "$1" ] && dirs+=("$1"); }
for py in python3 python; do
  command -v "$py" >/dev/null 2>&1 || continue
  while read -r sp; do
    for d in "$sp"/nvidia/*/lib; do add "$d"; done
  done < <("$py" -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
done
for root in "${CUDA_HOME:-}" /usr/local/cuda; do
  [ -n "$root" ] && add "$root/lib64"
done
# The driver library, when the dynamic loader's cache does not already have it.
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1 '; then
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
    [ -e "$d/libcuda.so.1" ] && { add "$d"; break; }
  done
fi
path=$(IFS=:; echo "${dirs[*]}")
for so in libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 \
          libnvrtc.so.13 libcudnn.so.9 libnccl.so.2; do
  found=no
  IFS=: read -ra ds <<<"$path"
  for d in "${ds[@]}"; do [ -e "$d/$so" ] && { found=yes; break; }; done
  if [ $found = no ] && ! ldconfig -p 2>/dev/null | grep -q "$so "; then
    echo "cuda-libs: $so not found (install the CUDA 13 runtime wheels or a toolkit)" >&2
  fi
done
echo "$path"
