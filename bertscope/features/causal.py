"""Does a feature labelled with a gold tag *carry* that tag? The causal check (MIB, Mueller et al.
2025, finds it missing from most SAE claims): switch the feature off (``edits``: its contribution
taken out of the layer's output) and measure, on held-out Brown documents,

- **the probe for the tag**: a logistic probe (tag vs every other word, ``probing.make_probe``)
  trained on intact layer-L states of training documents' words, scored (balanced accuracy) on
  held-out words intact, with the feature(s) removed, and with as many **control features** removed
  (for each, the feature whose firing count on the held-out words is closest, among the 20 closest
  the one that fires on the tag's words least often: same amount of change, other content);
- **masked-token accuracy on words of that tag**: each held-out word of the tag that is one word
  piece masked in turn (its sentence otherwise intact), top-1 of the masked-LM head intact, with
  the feature removed, with the control removed; and the same on as many words of other tags
  (what the feature does beyond its tag).

A feature that only correlates with its tag leaves both where the control leaves them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import numpy as np
import torch
from sklearn.metrics import balanced_accuracy_score

from bertscope.analysis.probing import make_probe
from bertscope.core.models import LoadedModel
from bertscope.core.passes import batches
from bertscope.core.word_pieces import batch_word_owners, word_pieces
from bertscope.corpora.tagged import TaggedSentences, brown_tagged
from bertscope.errors import BertScopeError
from bertscope.features.activations import check_layer, resid_post
from bertscope.features.active import layer_output
from bertscope.features.edits import MAX_EDITS, FeatureEdit, feature_edit
from bertscope.features.sae import TopKSAE
from bertscope.mlm.fill_mask import require_mlm
from bertscope.mlm.logit_lens import mlm_head

MAX_MASKED = 300  # masked words of the tag (and of other tags) scored


@dataclass(frozen=True)
class TagEffect:
    layer: int
    features: tuple[int, ...]  # switched off together
    tagset: str
    tag: str
    controls: tuple[int, ...]  # the control features, as many
    held_out_words: int  # words the probe is scored on
    tag_words: int  # of them, with the tag
    fires_on_tag: float  # share of the tag's held-out words any of the features fires on
    probe_intact: float  # balanced accuracy
    probe_removed: float
    probe_control: float
    masked_words: int  # words of the tag masked and predicted
    mlm_intact: float  # top-1 on them
    mlm_removed: float
    mlm_control: float
    other_words: int  # words of other tags masked
    other_intact: float
    other_removed: float

    def to_json(self) -> dict:
        return {k: round(v, 6) if isinstance(v, float) else list(v) if isinstance(v, tuple) else v
                for k, v in asdict(self).items()}

    @property
    def removed_name(self) -> str:
        """The removal's column name: "feature off" or "features off"."""
        return "features off" if len(self.features) > 1 else "feature off"

    def rows(self) -> list[dict]:
        """The check as a table: each measure intact, with the features off, with the controls off (None where a
        measure has no control)."""
        off = self.removed_name
        return [{"measure": f"probe for {self.tag} (balanced accuracy, {self.held_out_words:,} held-out words)",
                 "intact": self.probe_intact, off: self.probe_removed, "controls off": self.probe_control},
                {"measure": f"masked-LM top-1 on {self.masked_words} {self.tag} words", "intact": self.mlm_intact,
                 off: self.mlm_removed, "controls off": self.mlm_control},
                {"measure": f"masked-LM top-1 on {self.other_words} words of other tags",
                 "intact": self.other_intact, off: self.other_removed, "controls off": None}]


def _word_states(lm: LoadedModel, corpus: TaggedSentences, layer: int, tagset: str, tag: str,
                 progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """([word, d_model] layer ``layer``'s output at each word's first piece, [word] has the tag)."""
    states, labels = [], []
    for rows, padded, feed in batches(lm, list(corpus.texts), 32):
        hidden = layer_output(lm, feed, layer)  # [batch, token, d_model]
        owners, _ = batch_word_owners(padded, [corpus.spans[s] for s in rows])
        tags = [t for s in rows for t in corpus.tags[tagset][s]]  # [batch word]
        first: dict[int, tuple[int, int]] = {}
        for b, t in zip(*np.nonzero(owners >= 0)):
            first.setdefault(int(owners[b, t]), (int(b), int(t)))
        words = sorted(first)
        if words:
            where = torch.tensor([first[w] for w in words], device=hidden.device)
            states.append(hidden[where[:, 0], where[:, 1]].float().cpu().numpy())
            labels += [tags[w] == tag for w in words]
        if progress:
            progress(len(rows))
    return np.concatenate(states), np.asarray(labels)


def _masked_rows(lm: LoadedModel, corpus: TaggedSentences, tagset: str, tag: str, want: bool, limit: int,
                 seed: int) -> list[tuple[list[int], int, int]]:
    """(input ids with one word masked, its position, the word's id) for single-piece words whose tag
    is (``want``) or is not ``tag``; at most ``limit``, a seeded sample."""
    found = []
    for s, text in enumerate(corpus.texts):
        enc = lm.tokenizer(text, truncation=True, max_length=lm.max_length, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        for w, inside in enumerate(word_pieces(corpus.spans[s], offsets)):  # [word] its pieces
            if (corpus.tags[tagset][s][w] == tag) != want or len(inside) != 1:
                continue
            (start, end), (a, b) = corpus.spans[s][w], offsets[inside[0]]
            if a <= start and b == end and not text[a:start].strip():  # the word whole (and SentencePiece's space)
                found.append((list(ids), inside[0], ids[inside[0]]))
    rng = np.random.default_rng(seed)
    if len(found) > limit:
        found = [found[i] for i in sorted(rng.choice(len(found), limit, replace=False))]
    return [(ids[:p] + [lm.tokenizer.mask_token_id] + ids[p + 1:], p, i) for ids, p, i in found]


@torch.no_grad()
def _top1(lm: LoadedModel, rows, edit: Callable | None = None) -> float:
    """Top-1 accuracy at each row's masked word; ``edit()`` makes the context manager of the edit
    (one per pass: a hook context is entered once)."""
    if not rows:
        return float("nan")
    hits = 0
    for start in range(0, len(rows), 32):
        chunk = rows[start:start + 32]
        feed = lm.tokenizer.pad({"input_ids": [ids for ids, _, _ in chunk]}, return_tensors="pt")
        feed = {k: v.to(lm.device) for k, v in feed.items() if k in lm.tokenizer.model_input_names}
        with edit() if edit is not None else nullcontext():
            hidden = lm.run(feed, encoder_only=True).last_hidden_state  # [row, token, d_model]
        positions = torch.tensor([p for _, p, _ in chunk], device=hidden.device)
        # the masked-LM head at each row's mask ([row, vocab]): any model with one, pretraining heads too
        best = mlm_head(lm)(hidden[torch.arange(len(chunk), device=hidden.device), positions]).argmax(-1)  # [row]
        hits += int((best.cpu() == torch.tensor([i for _, _, i in chunk])).sum())
    return hits / len(rows)


@torch.no_grad()
def tag_effect(lm: LoadedModel, sae: TopKSAE, layer: int, features: int | Sequence[int], tag: str,
               tagset: str = "universal", train_sentences: int = 1000, held_sentences: int = 300, seed: int = 0,
               progress: Callable[[int, int], None] | None = None) -> TagEffect:
    """What switching ``features`` off (one, or several together: a tag is often spread over a few) does
    to the probe for ``tag`` and to masked-token accuracy on its words, beside as many control features
    of the same firing counts (module docstring).

    Args:
        lm: a model with a masked-LM head, the one the SAE was made for.
        sae: the SAE of layer ``layer``'s output.
        layer: the layer, from 0.
        features: a feature index or up to ``MAX_EDITS`` (64) of them, from 0, switched off together.
        tag: a tag of ``tagset`` ("NOUN", "VERB", ...).
        tagset: "universal" (Brown's 12 universal tags) or "brown" (its own fine tags).
        train_sentences: Brown sentences of the training documents the probe is fitted on (0: all of them).
        held_sentences: Brown sentences of the held-out documents everything is scored on (0: all of them).
        seed: the document split, the sentence samples, the probe and the masked words sampled.
        progress: called with (done, total): sentences read, then four scoring steps.

    Returns:
        A ``TagEffect``: the features and their controls; the held-out words and those with the tag; the share of the
            tag's words any feature fires on; the probe's balanced accuracy intact, features removed, controls removed;
            masked-LM top-1 on the tag's one-piece words (at most 300) the same three ways, and on as many words of
            other tags intact and with the features removed.
    """
    layer = check_layer(lm, layer)
    sae.check_for(lm, resid_post(layer))
    chosen = tuple(dict.fromkeys(sae.check_feature(f) for f in ([features] if isinstance(features, int)
                                                                 else features)))
    if not chosen or len(chosen) > MAX_EDITS:
        raise BertScopeError(f"Give between 1 and {MAX_EDITS} features to switch off.")
    require_mlm(lm)
    if tagset not in ("universal", "brown"):
        raise BertScopeError(f"The causal check reads Brown's tags (universal or brown), not {tagset!r}.")
    train = brown_tagged(train_sentences, seed, side="train")
    held = brown_tagged(held_sentences, seed, side="held-out")
    known = {t for s in held.tags[tagset] for t in s}
    if tag not in known:
        raise BertScopeError(f"No word of the held-out sample has the tag {tag!r} ({tagset}).")
    total = len(train) + len(held) + 4
    done = [0]

    def step(n: int) -> None:
        done[0] += n
        if progress:
            progress(done[0], total)

    sae = sae.to(lm.device)
    x_train, y_train = _word_states(lm, train, layer, tagset, tag, step)
    x_held, y_held = _word_states(lm, held, layer, tagset, tag, step)
    if y_train.sum() < 5 or y_held.sum() < 5:
        raise BertScopeError(f"Too few words tagged {tag!r} in the sample for a probe (train {int(y_train.sum())}, "
                             f"held-out {int(y_held.sum())}): take more sentences.")
    z = sae.encode(torch.from_numpy(x_held).to(lm.device)).cpu()  # [word, d_sae]
    fires = (z > 0).sum(0).numpy()  # [d_sae] held-out words each feature fires on
    on_tag = (z[torch.from_numpy(y_held)] > 0).float().mean(0).numpy()  # [d_sae] share of the tag's words
    taken = set(chosen)
    controls = []
    for f in chosen:  # the same firing count, the least of the tag among the 20 nearest counts
        gap = np.abs(fires - fires[f]).astype(np.float64)
        gap[list(taken)] = np.inf
        near = [int(f) for f in np.argsort(gap, kind="stable")[:20] if np.isfinite(gap[f])]
        if not near:
            raise BertScopeError(f"No feature is left to be a control: the SAE has {sae.d_sae} features.")
        controls.append(near[int(np.argmin(on_tag[near]))])
        taken.add(controls[-1])
    controls = tuple(controls)
    fires_on_tag = float((z[torch.from_numpy(y_held)][:, list(chosen)] > 0).any(1).float().mean())
    w_dec = sae.W_dec.detach().cpu()

    def removed(group: tuple[int, ...]) -> np.ndarray:
        return x_held - (z[:, list(group)] @ w_dec[list(group)]).numpy()

    probe = make_probe("logreg", seed=seed).fit(x_train, y_train)
    scores = [balanced_accuracy_score(y_held, probe.predict(x)) for x in (x_held, removed(chosen), removed(controls))]
    step(1)
    tag_rows = _masked_rows(lm, held, tagset, tag, True, MAX_MASKED, seed)
    other_rows = _masked_rows(lm, held, tagset, tag, False, max(len(tag_rows), 1), seed)
    saes = {layer: sae}
    def off():
        return feature_edit(lm, saes, [FeatureEdit(layer, f, "remove") for f in chosen])

    def off_control():
        return feature_edit(lm, saes, [FeatureEdit(layer, f, "remove") for f in controls])

    mlm = [_top1(lm, tag_rows), _top1(lm, tag_rows, off), _top1(lm, tag_rows, off_control)]
    step(2)
    other = [_top1(lm, other_rows), _top1(lm, other_rows, off)]
    step(1)
    return TagEffect(layer, chosen, tagset, tag, controls, len(y_held), int(y_held.sum()), fires_on_tag,
                     *map(float, scores), len(tag_rows), *mlm, len(other_rows), *other)
