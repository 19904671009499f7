"""One Ray actor of the engine: the model loaded once (its weights checked against the fingerprint
the calling machine took), BertScope's own passes over the planned batches it is handed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bertscope.analysis.attention_stats import head_sums
from bertscope.analysis.hidden_cache import WordTable, pooled_rows, weights_fingerprint
from bertscope.core.models import load_model
from bertscope.errors import BertScopeError

FEED_KEYS = ("input_ids", "attention_mask", "token_type_ids")  # what a corrupted batch carries (head importance)


def _load(name: str, dtype: str, fingerprint: str, on_gpu: bool):
    lm = load_model(name, device="cuda" if on_gpu else "cpu", dtype=dtype)
    if weights_fingerprint(lm) != fingerprint:
        raise BertScopeError(f"A Ray node loaded other weights for {name} than this machine: give every node "
                             "the same files (shared storage) or a hub id.")
    return lm


class ModelActor:
    """One Ray actor: the model loaded once, BertScope's own passes over the planned batches it is
    handed. ``job``: "heads" (statistics sums), "hidden" (pooled vectors and their rows),
    "importance" (gate gradients), "faithfulness" (whole items), "cka" (chunks of sentences
    through this model and ``options["model_b"]``) or "embed" (sentence embeddings of planned
    batches, ``options["kind"]`` their prompt)."""

    def __init__(self, name: str, dtype: str, fingerprint: str, job: str, on_gpu: bool,
                 table: WordTable | None = None, pooling: str = "mean", options: dict | None = None) -> None:
        self.lm = _load(name, dtype, fingerprint, on_gpu)
        self.job, self.table, self.pooling, self.options = job, table, pooling, dict(options or {})
        if job == "cka":
            self.lm_b = _load(self.options["model_b"], dtype, self.options["fingerprint_b"], on_gpu)
        if job == "embed":
            self.settings = _same_settings(self.lm, self.options["settings"])

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.job == "importance":
            return self._importance(rows)
        if self.job == "faithfulness":
            return self._faithfulness(rows)
        if self.job == "cka":
            return self._cka(rows)
        if self.job == "embed":
            return self._embed(rows)
        parts = [np.asarray(i, np.int64) for i in rows["indices"]]  # per planned batch: [sentence] task numbering
        texts = [str(t) for part in rows["texts"] for t in part]
        ends = np.cumsum([len(p) for p in parts])
        plan = [list(range(end - len(p), end)) for p, end in zip(parts, ends)]  # the batches, as planned
        if self.job == "heads":
            total, tokens = head_sums(self.lm, texts, plan=plan)
            return {"sums": total[None], "tokens": np.array([tokens]), "sentences": np.array([len(texts)])}
        out: dict[str, list] = {"pieces": [], "rows": [], "vectors": []}
        for pieces, destination, vectors in pooled_rows(self.lm, texts, self.table, self.pooling, plan=plan,
                                                        indices=np.concatenate(parts)):
            out["pieces"].append(pieces)
            out["rows"].append(destination)
            out["vectors"].append(vectors.reshape(-1))  # [example x (layer + 1) x dim]
        return {"pieces": np.array(out["pieces"]), "rows": _ragged(out["rows"], np.int64),
                "vectors": _ragged(out["vectors"], np.float32)}

    def _embed(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Each planned batch of prepared texts embedded as this process embeds it (``embed_batch``), one row back
        a batch: its texts' places and their vectors."""
        from bertscope.retrieval.embedding import embed_batch

        vectors = [embed_batch(self.lm, [str(t) for t in part], self.settings, self.options.get("kind")).reshape(-1)
                   for part in rows["texts"]]  # [batch x dim] each
        return {"indices": _ragged([np.asarray(i, np.int64) for i in rows["indices"]], np.int64),
                "vectors": _ragged(vectors, np.float32)}

    def _importance(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Σ|∂L/∂ξ| over the corrupted batches handed over (each row one batch, flattened)."""
        import torch

        from bertscope.interventions.importance import batch_gradient, new_gates
        from bertscope.mlm.masking import IGNORE_INDEX

        gates = new_gates(self.lm)
        total = torch.zeros(self.lm.num_layers, self.lm.num_heads, device=self.lm.device)
        tokens = positions = sentences = 0
        loss_sum = 0.0
        for i, shape in enumerate(rows["shape"]):
            shape = tuple(int(x) for x in shape)  # [batch, token]
            feed = {k: torch.from_numpy(np.asarray(rows[k][i], np.int64).reshape(shape)).to(self.lm.device)
                    for k in FEED_KEYS if k in rows and len(rows[k][i])}
            labels = torch.from_numpy(np.asarray(rows["labels"][i], np.int64).reshape(shape)).to(self.lm.device)
            chosen = labels != IGNORE_INDEX  # [batch, token]
            grad, loss = batch_gradient(self.lm, gates, feed, chosen, labels[chosen])
            total += grad
            tokens += int(feed["attention_mask"].sum())
            positions += int(chosen.sum())
            loss_sum += loss * int(chosen.sum())
            sentences += shape[0]
        return {"sums": total.double().cpu().numpy()[None], "tokens": np.array([tokens]),
                "positions": np.array([positions]), "loss_sum": np.array([loss_sum]),
                "sentences": np.array([sentences])}

    def _faithfulness(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Each item handed over, whole (``attribution.faithfulness.item_result``); its result goes
        back without the item, which the caller has."""
        from dataclasses import replace

        from bertscope.attribution.faithfulness import item_result

        o = self.options
        results = [replace(item_result(self.lm, item, o["methods"], o["removal"], o["steps"], o["seed"]), item=None)
                   for item in rows["item"]]
        return {"index": np.asarray(rows["index"], np.int64), "result": _objects(results)}

    def _cka(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Each chunk of sentences handed over through both models (``analysis.compare.chunk_sums``)."""
        from bertscope.analysis.compare import chunk_sums

        o = self.options
        sums = [chunk_sums(self.lm, self.lm_b, chunk, o["pool"], o["minibatch"], o["seed"], int(i))
                for i, chunk in zip(rows["index"], rows["chunk"])]
        return {"index": np.asarray(rows["index"], np.int64), "sums": _objects(sums)}


def _same_settings(lm: Any, given: Any) -> Any:
    """The embedding settings this actor's copy of the model declares, when they are the calling process's (the
    dense layers' folders aside: each machine reads its own copy); else one line. A node that loaded a hub id
    without the checkpoint's sentence-transformers files would otherwise pool another way, silently."""
    from dataclasses import replace
    from pathlib import Path

    from bertscope.retrieval.embedding import settings_of

    def shape(s: Any) -> Any:
        return replace(s, dense=tuple(replace(d, folder=Path()) for d in s.dense))

    own = settings_of(lm)
    if shape(own) != shape(given):
        raise BertScopeError(f"A Ray node reads other embedding settings for {lm.name} ({own.note}) than this machine "
                             f"({given.note}): give every node the model's whole folder (modules.json and its "
                             "modules), on shared storage.")
    return own


def _objects(values: list) -> np.ndarray:
    """An object array of Python objects: Ray Data carries such a column in its own serialised form."""
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def _ragged(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
    """An object array of 1-D arrays (Ray Data's column of variable-length arrays)."""
    column = np.empty(len(arrays), dtype=object)
    column[:] = [np.asarray(a, dtype) for a in arrays]
    return column
