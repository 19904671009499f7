"""Masked-token prediction: several masks, whole-word masking, most-confident-first filling.

    >>> from bertscope import load_model
    >>> lm = load_model("bundled-mlm")
    >>> r = fill_mask(lm, "He wrote a [MASK] to his mother.", top_k=3)
    >>> [(p.token, round(p.score, 2)) for p in r.predictions[0]]
    [('letter', 0.47), ('word', 0.08), ('message', 0.03)]

Independent predictions equal transformers' ``fill-mask`` pipeline: a softmax over the
vocabulary at each mask position of one forward pass, top k by probability, the token written
as ``tokenizer.decode([id])``. ``[MASK]``, ``<mask>`` and the model's own mask token are all
accepted and normalised to the model's mask token.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bertscope.core.forward import inspect, inspect_ids
from bertscope.core.inspection import Inspection
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.sources.presets import PRESETS

MAX_MASKS = 20
MAX_TOP_K = 100
ACCEPTED_MASKS = ("[MASK]", "<mask>")


def mask_spellings(own: str | None) -> str:
    """How a mask may be written for a model whose own mask token is ``own``, each spelling once:
    "[MASK] or <mask>", or "[MASK], <mask> or ▁[MASK]" for a tokenizer with a spelling of its own."""
    spellings = list(dict.fromkeys([*ACCEPTED_MASKS, *([own] if own else [])]))
    return ", ".join(spellings[:-1]) + " or " + spellings[-1]
# Mask spellings of other tools/families that we do not silently reinterpret.
_FOREIGN_MASKS = re.compile(r"<extra_id_\d+>|\[mask\]|<MASK>|\{mask\}|__MASK__|<\s*mask\s*>|\[\s*MASK\s*\]", re.I)


@dataclass(frozen=True)
class Prediction:
    token: str  # tokenizer.decode([token_id]), as the fill-mask pipeline writes it
    token_id: int
    score: float  # probability at that position

    def to_json(self) -> dict:
        return {"token": self.token, "token_id": self.token_id, "score": self.score}


@dataclass(frozen=True)
class FilledMask:
    position: int  # token index
    prediction: Prediction  # the token put there
    step: int  # 0 = filled first


@dataclass(frozen=True)
class FillMaskResult:
    inspection: Inspection  # the forward pass with every mask in place
    mask_positions: list[int]
    predictions: list[list[Prediction]]  # per mask, best first (independent, like the pipeline)
    original_ids: list[int] | None = None  # the ids before masking, when words were masked
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> list[list[dict]]:
        return [[p.to_json() for p in preds] for preds in self.predictions]


@dataclass(frozen=True)
class IterativeFill:
    steps: list[FilledMask]  # in the order filled (most confident first)
    joint_probability: float  # product of the chosen tokens' probabilities when chosen
    text: str  # the sentence with every mask filled


def require_mlm(lm: LoadedModel, usable: Callable[[str], bool] | None = None) -> None:
    """Raise unless ``lm`` has a masked-LM head; the message suggests presets with one, only
    those ``usable`` (e.g. loadable right now) when given, and says why the others are not."""
    if "mlm" not in lm.outputs:
        with_head = [n for n, p in PRESETS.items() if "mlm" in p.outputs and n != lm.name]
        if usable is None:
            hint = f"choose a model with one, e.g. {', '.join(with_head)}."
        else:
            ready = [n for n in with_head if usable(n)]
            later = len(with_head) - len(ready)
            hint = (f"choose a model with one that can be loaded here: {', '.join(ready)}" if ready
                    else "no model with one can be loaded here")
            if later:
                hint += (f" ({later} other presets with the head, e.g. bert-base-uncased, need the Hugging Face "
                         "hub or a copy in its local cache, and neither is available now).")
            else:
                hint += "."
        raise BertScopeError(f"{lm.name} has no masked-LM head (its checkpoint is an encoder only): {hint}")


def normalise_masks(lm: LoadedModel, text: str) -> str:
    """Write every accepted mask spelling as the model's own mask token."""
    own = lm.tokenizer.mask_token
    if own is None:
        raise BertScopeError(f"{lm.name}'s tokenizer has no mask token.")
    for spelling in {*ACCEPTED_MASKS, own}:
        text = text.replace(spelling, "\0")
    foreign = _FOREIGN_MASKS.search(text)
    if foreign:
        raise BertScopeError(
            f"{foreign.group(0)!r} is not a mask token here: write {mask_spellings(own)}."
        )
    return text.replace("\0", own)


def top_predictions(logits: np.ndarray, top_k: int, tokenizer, exclude: list[int] | None = None) -> list[Prediction]:
    """logits: [vocab] -> the top_k tokens by softmax probability (over the whole vocabulary)."""
    shifted = logits - logits.max()
    probs = np.exp(shifted) / np.exp(shifted).sum()  # [vocab]
    ranked = probs.copy()
    if exclude:
        ranked[exclude] = -1.0  # never chosen, but probabilities stay those of the full softmax
    best = np.argsort(-ranked, kind="stable")[:top_k]
    return [Prediction(tokenizer.decode([int(i)]), int(i), float(probs[i])) for i in best]


def _check_top_k(top_k: int) -> None:
    if not 1 <= top_k <= MAX_TOP_K:
        raise BertScopeError(f"top-k must be between 1 and {MAX_TOP_K}.")


def _mask_positions(lm: LoadedModel, r: Inspection) -> list[int]:
    return [int(i) for i in np.flatnonzero(r.input_ids == lm.tokenizer.mask_token_id)]


def fill_mask(lm: LoadedModel, text: str, top_k: int = 5) -> FillMaskResult:
    """Independent top-k predictions at every mask of ``text``.

    Args:
        lm: a model with a masked-LM head.
        text: the text, with up to ``MAX_MASKS`` masks written as the model's mask token (or [MASK]).
        top_k: predictions kept at each mask.

    Returns:
        A ``FillMaskResult``: the predictions at each mask, their positions, the inspection.
    """
    require_mlm(lm)
    _check_top_k(top_k)
    if not isinstance(text, str) or not text.strip():
        raise BertScopeError("The text is empty: type a sentence with [MASK] in it.")
    normalised = normalise_masks(lm, text)
    wanted = normalised.count(lm.tokenizer.mask_token)
    if wanted == 0:
        raise BertScopeError("The text has no mask: put [MASK] where a word should be predicted.")
    if wanted > MAX_MASKS:
        raise BertScopeError(f"The text has {wanted} masks; at most {MAX_MASKS} are allowed.")
    r = inspect(lm, normalised, with_attentions=False, logit_positions="masks")  # hidden states: logit lens
    positions = _mask_positions(lm, r)
    if len(positions) < wanted:
        raise BertScopeError(
            f"{wanted - len(positions)} of the {wanted} masks fell beyond the model's "
            f"{lm.max_length}-token limit: shorten the text."
        )
    predictions = [top_predictions(r.logits_at(i), top_k, lm.tokenizer) for i in positions]
    return FillMaskResult(r, positions, predictions, warnings=r.warnings)


def words_of(lm: LoadedModel, text: str) -> tuple[Inspection, list[str]]:
    """The text's words as the tokenizer splits them (for choosing words to mask)."""
    r = inspect(lm, text, with_logits=False, with_attentions=False, with_hidden_states=False)
    words: dict[int, str] = {}
    for token, word, seq in zip(r.tokens, r.word_ids, r.sequence_ids):
        if word is not None and seq == 0:
            words[word] = words.get(word, "") + token.removeprefix("##")
    return r, [words[i] for i in sorted(words)]


def fill_mask_words(lm: LoadedModel, text: str, words: list[int], top_k: int = 5) -> FillMaskResult:
    """Whole-word masking: every piece of each chosen word becomes a mask, then predict."""
    require_mlm(lm)
    _check_top_k(top_k)
    template, names = words_of(lm, text)
    if not words:
        raise BertScopeError("Choose at least one word to mask.")
    unknown = [w for w in words if not 0 <= w < len(names)]
    if unknown:
        raise BertScopeError(f"Word {unknown[0]} does not exist: the text has {len(names)} words.")
    chosen = set(words)
    ids = template.input_ids.tolist()
    positions = [i for i, w in enumerate(template.word_ids) if w in chosen and template.sequence_ids[i] == 0]
    if len(positions) > MAX_MASKS:
        raise BertScopeError(f"Those words make {len(positions)} masks; at most {MAX_MASKS} are allowed.")
    masked = [lm.tokenizer.mask_token_id if i in positions else t for i, t in enumerate(ids)]
    r = inspect_ids(lm, template, masked, with_attentions=False, logit_positions=positions)
    predictions = [top_predictions(r.logits_at(i), top_k, lm.tokenizer) for i in positions]
    return FillMaskResult(r, positions, predictions, original_ids=ids, warnings=template.warnings)


def iterative_fill(lm: LoadedModel, start: FillMaskResult) -> IterativeFill:
    """Fill the most confident mask, run again, repeat; the joint probability multiplies up.

    Special tokens ([MASK], [SEP], ...) are never filled in.

    Args:
        lm: the model ``start`` was read with.
        start: a ``fill_mask`` (or ``fill_mask_words``) result: its pass with every mask in place.

    Returns:
        An ``IterativeFill``: the masks in the order filled (position, token, step from 0), the product of each
            chosen token's probability when it was chosen, and the text with every mask filled.
    """
    ids = start.inspection.input_ids.tolist()
    remaining = list(start.mask_positions)
    current = start.inspection
    steps: list[FilledMask] = []
    joint = 1.0
    specials = [i for i in lm.tokenizer.all_special_ids if i < current.mlm_logits.shape[-1]]
    for step in range(len(remaining)):
        best = {i: top_predictions(current.logits_at(i), 1, lm.tokenizer, exclude=specials)[0] for i in remaining}
        position = max(remaining, key=lambda i: best[i].score)
        ids[position] = best[position].token_id
        joint *= best[position].score
        steps.append(FilledMask(position, best[position], step))
        remaining.remove(position)
        if remaining:
            current = inspect_ids(lm, start.inspection, ids, with_attentions=False, with_hidden_states=False,
                                  logit_positions=remaining)
    text = lm.tokenizer.decode(
        [t for t, special in zip(ids, start.inspection.special_mask) if not special]
    )
    return IterativeFill(steps, joint, text)
