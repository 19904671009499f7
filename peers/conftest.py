"""The peers lane: BertScope held to the tools a user would otherwise pick, each in its own environment
(``make test-peers``): TransformerLens 4.3's bridge, captum and nnsight 0.8 in ``.venv-peers``; SAELens 6.54
in ``.venv-saelens`` (it requires transformer-lens<4); pyvene 0.1.8 in ``.venv-pyvene``; tuned-lens 0.2.0 in
``.venv-tunedlens``; PyLate 1.6 in ``.venv-pylate`` and circuit-tracer 0.5.0 in ``.venv-circuittracer`` (their
transformers pins are not the app's: those tests ask the app's environment for BertScope's side and import no
BertScope here). Not part of ``make test``: the peers' stacks never touch the app's environment."""

from __future__ import annotations

import warnings

import pytest

warnings.filterwarnings("ignore")
SENTENCES = ["The bank of the river was muddy after the rain.", "She deposited the money at the bank.",
             "The keys to the cabinet are on the table.", "A dog slept under the old oak tree."]


@pytest.fixture(scope="session")
def mlm():
    from bertscope import load_model  # here, not at the top: .venv-pylate holds PyLate's stack, not BertScope

    return load_model("bundled-mlm", device="cpu")


@pytest.fixture(scope="session")
def random_base(tmp_path_factory):
    """A random BERT-base (bert-base-uncased's shapes) with its masked-LM head, saved to disk."""
    from bertscope.core.random_models import save_random_model

    return save_random_model("bert-base-uncased", tmp_path_factory.mktemp("bert-base"), heads="mlm", seed=0)
