"""The items of a faithfulness test on a fine-tuned classifier: texts (or text pairs) and the
model's own predicted class as the decision to explain (y = argmax of its head, as ferret and
ERASER explain a classifier's prediction, not the gold label).

From a labelled file (``tasks.predict.read_records``: CSV or JSONL with text[, pair][, label]; a
plain file is one text a line) or from Brown sentences spread over every document. Every
non-special token is a candidate for removal; [CLS] (the position every supported head reads,
RoBERTa's ``<s>`` included) stays. A text needs at most ``MAX_ITEM_TOKENS`` tokens and at least
``MIN_CANDIDATES`` to remove; longer or shorter ones are skipped and counted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from bertscope.attribution.items import MAX_ITEM_TOKENS, MAX_ITEMS, Item
from bertscope.core.forward import inspect
from bertscope.core.hooked_pass import check_text
from bertscope.core.models import LoadedModel
from bertscope.core.passes import inspection_feed
from bertscope.core.task_head import SEQUENCE
from bertscope.corpora.brown import read_brown
from bertscope.corpora.brown_tasks import sample_sentences
from bertscope.errors import BertScopeError

MIN_CANDIDATES = 3
READ_POSITION = 0  # the token a sequence-classification head reads ([CLS], <s>)


def require_classifier(lm: LoadedModel) -> None:
    """A sequence classifier whose decisions are classes (not a regression value)."""
    if lm.task is None or lm.task.kind != SEQUENCE:
        has = "no task head" if lm.task is None else f"a {lm.task.kind.replace('-', ' ')} head"
        raise BertScopeError(f"A faithfulness test of predicted classes needs a sequence classifier; {lm.name} has "
                             f"{has}.")
    if lm.task.scoring == "none":
        raise BertScopeError(f"{lm.name} is a regression head (one value, no classes): erasure is scored on the "
                             "probability of a predicted class.")


def class_probabilities(lm: LoadedModel, logits: torch.Tensor) -> torch.Tensor:
    """[rows, label] the head's probabilities: softmax, or each label's sigmoid (multi-label)."""
    logits = logits.float()
    return torch.sigmoid(logits) if lm.task.scoring == "sigmoid" else torch.softmax(logits, -1)


def decided_class(lm: LoadedModel, text: str, pair: str | None, source: str) -> Item | None:
    """The item for one text, or None when it is too long or has too few tokens to remove."""
    ins = inspect(lm, text, pair, with_logits=False, with_attentions=False, with_hidden_states=False)
    if ins.n_tokens > MAX_ITEM_TOKENS or ins.truncated:
        return None
    if ins.n_tokens - int(np.sum(ins.special_mask)) < MIN_CANDIDATES:
        return None
    logits = lm.run(inspection_feed(lm, ins)).logits[0]  # [label]
    p = class_probabilities(lm, logits[None])[0]
    best = int(torch.argmax(p))
    return Item(text, "", "", "", ins, READ_POSITION, best, lm.task.labels[best], float(p[best]), source,
                decision="class", pair=pair)


def class_items(lm: LoadedModel, texts: Sequence[str], pairs: Sequence[str | None] | None = None,
                sources: Sequence[str] | None = None) -> tuple[list[Item], int]:
    """(items, texts skipped) for ``texts`` (and their second segments)."""
    require_classifier(lm)
    if not texts:
        raise BertScopeError("The file has no texts.")
    if len(texts) > MAX_ITEMS:
        raise BertScopeError(f"At most {MAX_ITEMS:,} texts at once; the file has {len(texts):,}.")
    items, skipped = [], 0
    for i, text in enumerate(texts):
        source = sources[i] if sources else f"record {i + 1}"
        text = check_text(text, source)
        pair = None if pairs is None else pairs[i]
        item = decided_class(lm, text, pair, source)
        if item is None:
            skipped += 1
        else:
            items.append(item)
    if not items:
        raise BertScopeError(f"No text has between {MIN_CANDIDATES} and {MAX_ITEM_TOKENS - 2} tokens to remove: "
                             "nothing to test.")
    return items, skipped


def brown_class_items(lm: LoadedModel, n: int = 200, seed: int = 0, folder=None) -> list[Item]:
    """``n`` Brown sentences spread over every document (in corpus order), each with the class the
    model predicts."""
    require_classifier(lm)
    if not 1 <= n <= MAX_ITEMS:
        raise BertScopeError(f"Give between 1 and {MAX_ITEMS:,} sentences (N = {n}).")
    corpus = read_brown(folder)
    pool = sample_sentences(corpus.documents, min(3 * n, 57_000), seed)
    order = np.random.default_rng(seed).permutation(len(pool))
    found: list[tuple[int, Item]] = []
    for index in order.tolist():
        if len(found) >= n:
            break
        d, sentence = pool[index]
        document = corpus.documents[d]
        item = decided_class(lm, sentence.text, None, f"Brown {document.id} ({document.genre})")
        if item is not None:
            found.append((index, item))
    if len(found) < n:
        raise BertScopeError(f"Only {len(found)} Brown sentences of at most {MAX_ITEM_TOKENS} tokens were found for "
                             f"{n}: ask for fewer.")
    return [item for _, item in sorted(found, key=lambda pair: pair[0])]
