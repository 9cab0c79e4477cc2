#!/usr/bin/env bash
# Call 1 on the H200 host (README.md beside this: the calls). Carries .gsc/p1: fp4forge with
# its libraries and the first part of the stream, which holds every wheel. Stores the part
# under /tmp/gsc (kept while the machine stays warm), installs the wheels into /tmp/site,
# checks torch.version.cuda and every Python import (vLLM's CUDA extensions arrive later),
# and makes the models with fp4forge on the device (make_models.sh).
set -uo pipefail
here=tools/gpu-serve-check
G=/tmp/gsc; O=${OUT:-$G/out}
mkdir -p "$G/parts" "$G/ff" "$G/set" "$O"
cp .gsc/p1/* "$G/parts/" && ls -la "$G/parts"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'torch.version.cuda', torch.version.cuda, 'transformers', transformers.__version__, 'gpu', torch.cuda.is_available())"
tar xzf "$G/parts/ff.tar.gz" -C "$G/ff"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/ff/lib exec %s/ff/fp4forge "$@"\n' "$G" "$G" > "$G/ff/ff.sh"
chmod +x "$G/ff/ff.sh"
"$G/ff/ff.sh" --help | head -1 || { echo "fp4forge does not start here:"; LD_LIBRARY_PATH=$G/ff/lib ldd "$G/ff/fp4forge" | grep -i "not found"; }
# the part ends inside the first CUDA extension: tar stops there, every wheel is complete
(cd "$G/set" && tar xf "$G/parts/set.tar.01" 2>&1 | tail -2); rm -rf "$G/set/big"
echo "wheels: $(ls "$G/set/wheels" | wc -l)"
t0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "$G"/set/wheels/*.whl 2>&1 | tail -5
echo "pip install: $(( $(date +%s) - t0 )) s, rc ${PIPESTATUS[0]}"
PYTHONPATH=/tmp/site python3 $here/import_check.py --no-ext > "$O/import_check1.log" 2>&1
echo "import_check (no extensions) rc=$?"; grep -v "^ok " "$O/import_check1.log" | grep -v "WARNING\|^INFO\|^W1" | tail -15
t0=$(date +%s)
bash $here/make_models.sh "$G/ff/ff.sh" "$G/models" python3 > "$O/make_models.log" 2>&1
echo "make_models rc=$? in $(( $(date +%s) - t0 )) s"; tail -22 "$O/make_models.log"
(cd "$G/models" && sha256sum */q/model.safetensors */qL/model.safetensors */dq*/model.safetensors | sed 's/^\(.\{16\}\)[^ ]*/\1/')
df -h /tmp | tail -1
