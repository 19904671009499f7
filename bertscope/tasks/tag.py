"""Token classification (NER, part-of-speech taggers): each word piece's label, each word's, and the
entities (BERT, §5.3: a layer over every token; a word is labelled by its first piece).

- ``tokens``: every piece that is not a special token (an unknown piece as its text), its most
  probable label and that label's softmax probability;
- ``words``: one per word (pieces sharing the fast tokenizer's word id), the label and score of its
  first piece, with the word's character span;
- ``entities``: B-/I- pieces grouped as transformers' ``token-classification`` pipeline does with
  ``aggregation_strategy="simple"``: its own ``postprocess`` (``gather_pre_entities`` and
  ``aggregate``) run on the logits of our pass, so the grouping is the pipeline's by construction;
  ``tests/tasks/test_predict.py`` checks the whole output against the pipeline to 1e-5.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bertscope.core.models import LoadedModel
from bertscope.core.passes import batches, wide
from bertscope.core.task_head import TOKEN, task_inputs
from bertscope.runtime.hf import quiet_transformers

_PIPELINES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _grouping(lm: LoadedModel) -> Any:
    """transformers' token-classification pipeline on ``lm``'s own model, for its postprocessing
    only (it never runs the model: the passes are ours). One per model."""
    from transformers import TokenClassificationPipeline

    found = _PIPELINES.get(lm.model)
    if found is None:
        with quiet_transformers():
            found = TokenClassificationPipeline(model=lm.model, tokenizer=lm.tokenizer, device=lm.device)
        _PIPELINES[lm.model] = found
    return found


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


@dataclass(frozen=True)
class Tagging:
    """One text's labels."""

    text: str
    tokens: list[dict]  # {"token", "label", "score"} per piece (special tokens left out)
    words: list[dict]  # {"word", "start", "end", "label", "score"} per word
    entities: list[dict]  # {"entity_group", "word", "start", "end", "score"}
    truncated: bool = False
    scores: np.ndarray = field(default=None, repr=False)  # [token, label] softmax of every piece, specials included

    def to_json(self) -> dict:
        out = {"text": self.text, "tokens": self.tokens, "words": self.words, "entities": self.entities}
        if self.truncated:
            out["truncated"] = True
        return out


def tag(lm: LoadedModel, texts: Sequence[str], batch_size: int = 32,
        progress: Callable[[int, int], None] | None = None) -> list[Tagging]:
    """Each text's pieces, words and entities, in the order given.

    Args:
        lm: a token classifier.
        texts: the inputs.
        batch_size: texts a batch.
        progress: called with (done, total).

    Returns:
        A ``Tagging`` a text: its pieces, words, tags and entities.
    """
    from transformers.pipelines.token_classification import AggregationStrategy

    texts = task_inputs(lm, TOKEN, texts, "tag")
    grouping, labels = _grouping(lm), lm.task.labels
    out: list[Tagging | None] = [None] * len(texts)
    done = 0
    for rows, padded, feed in batches(lm, texts, batch_size):
        logits = wide(lm.run(feed).logits)  # [batch, token, label]
        probabilities = torch.softmax(logits, dim=-1).cpu().numpy()
        logits = logits.cpu()
        for r, row in enumerate(rows):
            real = padded.feed["attention_mask"][r].bool()  # [token]: right or left padding
            keep = real.numpy()
            ids = padded.feed["input_ids"][r][real]  # [token]
            special = padded.special[r][keep]
            offsets = np.asarray(padded.offsets[r], np.int64)[keep]  # [token, 2]
            p = probabilities[r][keep]  # [token, label]
            best = p.argmax(-1)
            pieces = lm.tokenizer.convert_ids_to_tokens(ids.tolist())
            unknown = lm.tokenizer.unk_token_id
            pieces = [texts[row][o[0]:o[1]] if int(i) == unknown else piece  # as the pipeline shows them
                      for piece, i, o in zip(pieces, ids, offsets)]
            tokens = [{"token": pieces[i], "label": labels[best[i]], "score": float(p[i, best[i]])}
                      for i in range(len(pieces)) if not special[i]]
            word_ids = [w for w, k in zip(padded.word_ids[r], keep) if k]
            words: dict[int, dict] = {}
            for i, w in enumerate(word_ids):
                if w is None or special[i]:
                    continue
                start, end = int(offsets[i][0]), int(offsets[i][1])
                if w not in words:  # the first piece labels the word
                    words[w] = {"word": texts[row][start:end], "start": start, "end": end,
                                "label": labels[best[i]], "score": float(p[i, best[i]])}
                else:
                    words[w]["end"] = end
                    words[w]["word"] = texts[row][words[w]["start"]:end]
            chunk = {"logits": logits[r][real][None], "input_ids": ids[None],
                     "special_tokens_mask": torch.from_numpy(special.astype(np.int64))[None],
                     "offset_mapping": torch.from_numpy(offsets)[None], "sentence": texts[row], "is_last": True,
                     "word_ids": None, "word_to_chars_map": None}
            entities = grouping.postprocess([chunk], aggregation_strategy=AggregationStrategy.SIMPLE)
            entities = [{k: _plain(v) for k, v in e.items()} for e in entities]
            out[row] = Tagging(texts[row], tokens, list(words.values()), entities,
                               padded.original[r] > lm.max_length, probabilities[r][keep])
        done += len(rows)
        if progress:
            progress(done, len(texts))
    return out
