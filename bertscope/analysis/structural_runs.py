"""Structural probes at every hidden state of a model on UD English-EWT: states from the hidden-state
cache (the mean of each word's pieces), a distance and a depth probe trained per layer on EWT
train with early stopping on dev, scored on test, beside the right-branching chain and a
random-weight model of the same config (at the best layer).

    >>> from bertscope import load_model
    >>> result = structural_probes(load_model("bundled"), max_train=3000)   # doctest: +SKIP
    >>> result.best_layer, result.layers[result.best_index]["uuas"]           # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from bertscope.analysis.hidden_cache import CachedStates, hidden_states
from bertscope.analysis.structural_probe import (
    WHATS,
    ProbeSentence,
    chain_report,
    depth_report,
    distance_report,
    train_structural_probe,
)
from bertscope.core.layers import EMBEDDINGS, hidden_label
from bertscope.core.models import LoadedModel
from bertscope.corpora.ewt import TreebankSentence, ewt_task, read_ewt
from bertscope.corpora.probe_tasks import ProbeTask
from bertscope.errors import BertScopeError
from bertscope.runtime.progress import staged

MIN_WORDS = 2  # a one-word sentence has no pair to probe
TRAINING = "Structural probes trained (each epoch reports), layers"  # one stage: its clock says the time left


def sentence_rows(states: CachedStates, treebank: Sequence[TreebankSentence]) -> list[tuple[int, int] | None]:
    """Each sentence's rows in the cached states, or None where the model saw fewer words than the
    sentence has (words cut by truncation, or left without a piece)."""
    if states.sentences is None:
        raise BertScopeError("The cached states do not say which sentence each word came from.")
    owner = np.asarray(states.sentences)
    starts = np.searchsorted(owner, np.arange(len(treebank)), side="left")
    ends = np.searchsorted(owner, np.arange(len(treebank)), side="right")
    return [(int(a), int(b)) if b - a == len(s) else None for a, b, s in zip(starts, ends, treebank)]


def probe_sentences(states: CachedStates, treebank: Sequence[TreebankSentence], layer: int,
                    keep: Sequence[int]) -> list[ProbeSentence]:
    """The ``keep`` sentences (indices into ``treebank``, each with all its words in the states)
    with their words' vectors at ``layer``."""
    rows = sentence_rows(states, treebank)
    matrix = states.layer(layer)
    out = []
    for i in keep:
        if rows[i] is None:
            raise BertScopeError(f"{treebank[i].id} lost words in the model's pass: it cannot be probed.")
        a, b = rows[i]
        out.append(ProbeSentence(treebank[i].id, np.array(matrix[a:b], np.float32), treebank[i].heads,
                                 treebank[i].xpos))
    return out


def state_index(layer) -> int:
    """A row's layer label ("embeddings" or a block number) as an index into the hidden states."""
    return 0 if layer == EMBEDDINGS else int(layer) + 1


@dataclass
class StructuralResult:
    model: str
    layers: list[dict]  # per hidden state: layer, uuas, dspr, root_accuracy, nspr, epochs
    baselines: dict
    best_index: int  # the row of the best UUAS (distance) or root accuracy (depth only)
    trees: list[dict]
    counts: dict
    probe: object = None  # the trees' layer's trained distance probe (TrainedProbe), for new predictions
    test: list = field(default_factory=list)  # the trees' layer's test ProbeSentences (their vectors)
    tree_index: int | None = None  # the row whose trees are kept (default: the best)

    @property
    def best_layer(self):
        return self.layers[self.best_index]["layer"]

    @property
    def best_state(self) -> int:
        """``best_layer`` as an index into the hidden states (0 = the embeddings)."""
        return state_index(self.best_layer)

    @property
    def tree_layer(self):
        """The layer of ``trees``, ``probe`` and ``test``: the best unless asked for another."""
        return self.layers[self.best_index if self.tree_index is None else self.tree_index]["layer"]

    @property
    def tree_state(self) -> int:
        """``tree_layer`` as an index into the hidden states (0 = the embeddings)."""
        return state_index(self.tree_layer)

    def to_json(self) -> dict:
        return {"model": self.model, "corpus": "ewt", **self.counts, "layers": self.layers,
                "baselines": self.baselines, "best_layer": self.best_layer, "trees_layer": self.tree_layer,
                "trees": self.trees}


MIN_DEV = 50  # the fewest dev sentences early stopping reads when the training side is sampled


def subset_task(task: ProbeTask, rows: Sequence[int]) -> ProbeTask:
    """``task`` cut to the sentences ``rows`` (in that order), named after them so its cached states are
    its own."""
    if list(rows) == list(range(len(task.words))):
        return task
    pick = lambda values: None if values is None else tuple(values[i] for i in rows)  # noqa: E731
    digest = hashlib.sha256(",".join(map(str, rows)).encode()).hexdigest()[:12]
    return replace(task, name=f"{task.name}-{len(rows)}-{digest}", words=pick(task.words), labels=pick(task.labels),
                   sentences=pick(task.sentences), spans=pick(task.spans), groups=pick(task.groups))


def sample_indices(n: int, limit: int | None, seed: int) -> list[int]:
    if limit is None or limit >= n:
        return list(range(n))
    return sorted(np.random.default_rng(seed).choice(n, limit, replace=False).tolist())


def _sample_splits(max_train: int | None, max_test: int | None, seed: int) -> tuple[dict, dict, dict]:
    """EWT's three sides sampled (sentences of at least ``MIN_WORDS`` words; dev in proportion to the training
    sample: a small run reads a small dev side): (sentences, their own tasks, every row kept) by side."""
    splits = {split: read_ewt(split) for split in ("train", "dev", "test")}
    keep = {split: [i for i, s in enumerate(sents) if len(s) >= MIN_WORDS] for split, sents in splits.items()}
    usable_train = len(keep["train"])
    keep["train"] = [keep["train"][i] for i in sample_indices(len(keep["train"]), max_train, seed)]
    keep["test"] = [keep["test"][i] for i in sample_indices(len(keep["test"]), max_test, seed)]
    dev_size = None if max_train is None else max(MIN_DEV, round(len(keep["dev"]) * len(keep["train"]) / usable_train))
    keep["dev"] = [keep["dev"][i] for i in sample_indices(len(keep["dev"]), dev_size, seed)]
    # only the sentences used are read: their own task, so the states cached are theirs alone
    tasks = {split: subset_task(ewt_task(split), keep[split]) for split in splits}
    splits = {split: [splits[split][i] for i in keep[split]] for split in splits}
    return splits, tasks, {split: list(range(len(splits[split]))) for split in splits}


def _checked_layers(lm: LoadedModel, layers: Sequence[int] | None, whats: tuple[str, ...],
                    tree_state: int | None) -> list[int]:
    chosen = list(range(lm.num_layers + 1)) if layers is None else sorted(set(layers))
    if not chosen or not all(0 <= s <= lm.num_layers for s in chosen):
        raise BertScopeError(f"Hidden states are 0 (the embeddings) to {lm.num_layers}.")
    if tree_state is not None and tree_state not in chosen:
        raise BertScopeError(f"The trees' layer {hidden_label(tree_state)} is not among the layers probed.")
    if tree_state is not None and "distance" not in whats:
        raise BertScopeError("Trees come from the distance probe: leave out --what depth.")
    return chosen


def _read_whole(states: dict, splits: dict, keep: dict) -> int:
    """Leaves out of ``keep`` the sentences the model could not read whole (longer than it takes); how many."""
    dropped = 0
    for split in splits:
        whole = sentence_rows(states[split], splits[split])
        dropped += sum(whole[i] is None for i in keep[split])
        keep[split] = [i for i in keep[split] if whole[i] is not None]
    return dropped


def _probe(sents: dict, whats: tuple[str, ...], rank: int | None, seed: int,
           epochs: Callable | None = None) -> tuple[dict, dict]:
    """Each probe trained on ``sents["train"]`` (early stopping on dev) and scored on test: (the scores, {probe:
    (the predicted trees' edges or None, the trained probe)})."""
    scores: dict = {}
    fitted = {}
    for w in whats:
        trained = train_structural_probe(sents["train"], sents["dev"], w, rank, seed, progress=epochs)
        predicted = [trained.predict(s) for s in sents["test"]]
        report = distance_report(predicted, sents["test"]) if w == "distance" else \
            depth_report(predicted, sents["test"])
        fitted[w] = (report.pop("edges", None), trained)
        scores.update(report)
        scores[f"{w}_epochs"] = trained.epochs
    return scores, fitted


def _trees(edges: list | None, splits: dict, keep: dict) -> list[dict]:
    """The test sentences' gold heads and predicted edges (words numbered from 1)."""
    trees = []
    for i, s in zip(keep["test"], edges or []):
        sentence = splits["test"][i]
        trees.append({"sentence_id": sentence.id, "words": sentence.tokens, "gold_heads": sentence.heads,
                      "predicted_edges": [[a + 1, b + 1] for a, b in s]})
    return trees


def structural_probes(lm: LoadedModel, layers: Sequence[int] | None = None, rank: int | None = None,
                      what: str = "both", max_train: int | None = None, max_test: int | None = None,
                      seed: int = 0, random_model: LoadedModel | None = None,
                      progress: Callable[[int, int, str], None] | None = None,
                      tree_state: int | None = None) -> StructuralResult:
    """Distance and depth probes at each hidden state (0 = embeddings; default all). The test trees
    (and the probe kept for new sentences) are the best layer's, or ``tree_state``'s (one of
    ``layers``)."""
    whats = WHATS if what == "both" else (what,)
    if any(w not in WHATS for w in whats):
        raise BertScopeError(f"Unknown probe {what!r}: use distance, depth or both.")
    splits, tasks, keep = _sample_splits(max_train, max_test, seed)
    chosen = _checked_layers(lm, layers, whats, tree_state)

    def states_of(model: LoadedModel) -> dict:
        out = {}
        for split in splits:
            stage = f"hidden states of EWT {split} ({model.name}), word pieces"
            if progress:
                progress(0, 1, stage)
            out[split] = hidden_states(model, tasks[split], "mean", progress=staged(progress, stage))
        return out

    states = states_of(lm)
    dropped = _read_whole(states, splits, keep)
    if not keep["train"] or not keep["dev"] or not keep["test"]:
        raise BertScopeError(f"{lm.name} reads no EWT sentence whole (its limit is {lm.max_length} tokens).")
    rows, fitted = [], {}
    for n, state in enumerate(chosen):
        sents = {split: probe_sentences(states[split], splits[split], state, keep[split]) for split in splits}
        # each epoch reports (the bar's text moves, and a Stop is heard within an epoch, not a layer)
        epochs = None if progress is None else (lambda *_, n=n: progress(n, len(chosen), TRAINING))
        scores, by_probe = _probe(sents, whats, rank, seed, epochs)
        rows.append({"layer": hidden_label(state), **scores})
        fitted.update({(state, w): found for w, found in by_probe.items()})
        if progress:
            progress(n + 1, len(chosen), TRAINING)
    key = "uuas" if "distance" in whats else "root_accuracy"
    best = int(np.argmax([r[key] if r[key] is not None else -1 for r in rows]))
    best_sents = probe_sentences(states["test"], splits["test"], chosen[best], keep["test"])
    baselines: dict = {"chain": chain_report(best_sents)}
    if random_model is not None:
        other = states_of(random_model)
        sents = {split: probe_sentences(other[split], splits[split], chosen[best], keep[split]) for split in splits}
        baselines["random_model"] = {"layer": rows[best]["layer"], "model": random_model.name,
                                     **{k: v for k, v in _probe(sents, whats, rank, seed)[0].items()
                                        if not k.endswith("_epochs")}}
    shown = best if tree_state is None else chosen.index(tree_state)
    test_sents = best_sents if shown == best else probe_sentences(states["test"], splits["test"], chosen[shown],
                                                                  keep["test"])
    edges, kept_probe = fitted.get((chosen[shown], "distance"), (None, None))
    counts = {"train_sentences": len(keep["train"]), "dev_sentences": len(keep["dev"]),
              "test_sentences": len(keep["test"]), "left_out_sentences": dropped, "pooling": "mean of a word's pieces",
              "rank": rank or int(states["train"].layer(0).shape[1])}
    return StructuralResult(lm.name, rows, baselines, best, _trees(edges, splits, keep), counts, kept_probe,
                            test_sents, None if tree_state is None else shown)


def random_twin(lm: LoadedModel, seed: int = 0) -> LoadedModel:
    """A random-weight model of ``lm``'s config with its tokenizer (the structural probe's
    "random model" baseline), saved once in the user cache."""
    import re

    import torch
    from transformers import AutoModel

    from bertscope.core.models import load_model
    from bertscope.runtime.atomic import writing_folder
    from bertscope.runtime.user_cache import user_cache_dir

    folder = user_cache_dir() / "random-models" / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', lm.name)}-twin-{seed}"
    if not (folder / "config.json").is_file():  # published whole (a kill mid-save leaves no folder)
        torch.manual_seed(seed)
        with writing_folder(folder) as tmp:
            AutoModel.from_config(lm.model.config).save_pretrained(tmp)
            lm.tokenizer.save_pretrained(tmp)
    return load_model(str(folder), device=str(lm.device))
