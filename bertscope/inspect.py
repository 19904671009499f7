"""One forward pass -> one typed result.

    >>> from bertscope import load_model, inspect
    >>> lm = load_model("bundled")
    >>> r = inspect(lm, "The bank of the river.")
    >>> r.tokens[:3], r.attentions.shape          # [layer, head, query, key]
    (['[CLS]', 'the', 'bank'], (6, 12, 9, 9))

Everything handed out is CPU float32 numpy, so analysis code never touches torch or the
device. ``inspect_batch`` runs many sentences with padding; each ``BatchInspection`` keeps
the attention mask, and ``BatchInspection.item(i)`` returns sentence ``i`` with the padding
cut away, so no statistic built on it can count a pad token.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from .errors import BertScopeError
from .models import LoadedModel
from .tokens import readable_tokens

MAX_CHARS = 100_000  # beyond this even tokenising is wasteful: the model sees <= 512 tokens


@dataclass(frozen=True, eq=False)
class Inspection:
    """Everything one forward pass of one input produced."""

    model_name: str
    text: str
    text_pair: str | None
    tokens: list[str]  # readable; "##" marks a piece continuing a word, in every family
    raw_tokens: list[str]  # as the tokenizer spells them ("Ġbank", "▁bank", "##ing")
    input_ids: np.ndarray  # [token] int64
    token_type_ids: np.ndarray  # [token] int64; zeros for models without segments
    word_ids: list[int | None]  # word index within its segment; None for special tokens
    sequence_ids: list[int | None]  # 0 = text, 1 = text_pair, None = special token
    special_mask: np.ndarray  # [token] bool
    offsets: list[tuple[int, int]]  # character span of each token in its own text; (0, 0) if special
    attentions: np.ndarray | None  # [layer, head, query, key] float32; each row sums to 1
    # (None only from inspect_batch(..., with_attentions=False))
    hidden_states: np.ndarray | None  # [layer + 1, token, dim] float32; index 0 = embedding output
    # (None only from inspect_batch(..., with_hidden_states=False))
    mlm_logits: np.ndarray | None  # [token, vocab] float32, when the model has an MLM head
    nsp_logits: np.ndarray | None  # [2] float32 (IsNext, NotNext), when it has an NSP head
    truncated: bool
    original_length: int  # tokens before truncation, special tokens included
    warnings: tuple[str, ...]

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def n_layers(self) -> int:
        if self.hidden_states is not None:
            return int(self.hidden_states.shape[0]) - 1
        return int(self.attentions.shape[0])

    @property
    def n_heads(self) -> int:
        if self.attentions is None:
            raise BertScopeError("This result was computed without attentions.")
        return int(self.attentions.shape[1])


@dataclass(frozen=True, eq=False)
class BatchInspection:
    """One padded batch; ``item(i)`` gives sentence i without padding."""

    model_name: str
    indices: list[int]  # position of each row in the caller's list
    texts: list[str]
    text_pairs: list[str | None]
    input_ids: np.ndarray  # [batch, token] int64, padded
    token_type_ids: np.ndarray  # [batch, token] int64
    attention_mask: np.ndarray  # [batch, token] bool; False = padding
    special_mask: np.ndarray  # [batch, token] bool (padding counts as special)
    word_ids: list[list[int | None]]  # per row, padded positions None
    sequence_ids: list[list[int | None]]
    offsets: list[list[tuple[int, int]]]  # per row: character span of each token in its text
    raw_tokens: list[list[str]]
    tokens: list[list[str]]
    attentions: np.ndarray | None  # [batch, layer, head, query, key]; pad keys get 0 weight;
    # None when the batch was run with with_attentions=False
    hidden_states: np.ndarray | None  # [batch, layer + 1, token, dim]; None if not asked for
    mlm_logits: np.ndarray | None  # [batch, token, vocab]
    nsp_logits: np.ndarray | None  # [batch, 2]
    truncated: list[bool]
    original_lengths: list[int]

    @property
    def lengths(self) -> np.ndarray:  # [batch] real tokens per row
        return self.attention_mask.sum(axis=1)

    def __len__(self) -> int:
        return len(self.texts)

    def item(self, i: int) -> Inspection:
        keep = np.flatnonzero(self.attention_mask[i])  # [token] real positions (any pad side)
        cut = lambda seq: [seq[j] for j in keep]  # noqa: E731
        return Inspection(
            model_name=self.model_name,
            text=self.texts[i],
            text_pair=self.text_pairs[i],
            tokens=cut(self.tokens[i]),
            raw_tokens=cut(self.raw_tokens[i]),
            input_ids=self.input_ids[i, keep],
            token_type_ids=self.token_type_ids[i, keep],
            word_ids=cut(self.word_ids[i]),
            sequence_ids=cut(self.sequence_ids[i]),
            special_mask=self.special_mask[i, keep],
            offsets=cut(self.offsets[i]),
            attentions=None if self.attentions is None else self.attentions[i][:, :, keep][:, :, :, keep],
            hidden_states=None if self.hidden_states is None else self.hidden_states[i][:, keep],
            mlm_logits=None if self.mlm_logits is None else self.mlm_logits[i, keep],
            nsp_logits=None if self.nsp_logits is None else self.nsp_logits[i],
            truncated=self.truncated[i],
            original_length=self.original_lengths[i],
            warnings=_truncation_warning(self.truncated[i], self.original_lengths[i], len(keep)),
        )


def _truncation_warning(truncated: bool, original: int, kept: int) -> tuple[str, ...]:
    if not truncated:
        return ()
    return (f"The input has {original} tokens; only the first {kept} (the model's maximum) were used.",)


def _check_text(text: Any, what: str = "text") -> str:
    if not isinstance(text, str) or not text.strip():
        raise BertScopeError(f"The {what} is empty: type at least one word.")
    if len(text) > MAX_CHARS:
        raise BertScopeError(
            f"The {what} has {len(text):,} characters; the limit is {MAX_CHARS:,}."
        )
    return text


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy()


def _run_model(
    lm: LoadedModel, enc: Any, with_logits: bool, with_attentions: bool = True,
    with_hidden_states: bool = True,
) -> dict[str, np.ndarray | None]:
    """The one forward pass: model inputs -> CPU float32 arrays, batch first."""
    feed = {k: enc[k].to(lm.device) for k in lm.tokenizer.model_input_names if k in enc}
    with lm.guard, torch.inference_mode():  # bounded concurrent passes per shared model
        out = lm.model(**feed, output_attentions=with_attentions,
                       output_hidden_states=with_hidden_states, return_dict=True)
    logits = getattr(out, "prediction_logits", None)
    if logits is None:
        logits = getattr(out, "logits", None)
    nsp = getattr(out, "seq_relationship_logits", None)
    return {
        "attentions": _numpy(torch.stack(out.attentions, dim=1)) if with_attentions else None,
        "hidden_states": _numpy(torch.stack(out.hidden_states, dim=1)) if with_hidden_states else None,
        "mlm_logits": _numpy(logits) if (with_logits and logits is not None and "mlm" in lm.heads) else None,
        "nsp_logits": _numpy(nsp) if (nsp is not None and "nsp" in lm.heads) else None,
    }


def _forward_batch(
    lm: LoadedModel,
    texts: list[str],
    pairs: list[str | None],
    with_logits: bool,
    indices: list[int],
    with_attentions: bool = True,
    with_hidden_states: bool = True,
) -> BatchInspection:
    tok = lm.tokenizer
    has_pairs = any(p is not None for p in pairs)
    if has_pairs and any(p is None for p in pairs):
        raise BertScopeError("Give a second text for every sentence of a batch, or for none.")
    second = pairs if has_pairs else None
    options = dict(
        add_special_tokens=True, padding=True, return_tensors="pt", return_special_tokens_mask=True,
    )
    enc = tok(texts, second, truncation=False, **options)
    original = enc["attention_mask"].sum(dim=1).tolist()
    if max(original) > lm.max_length:  # tokenise again only when something must be cut
        enc = tok(texts, second, truncation=True, max_length=lm.max_length, **options)
    n = len(texts)
    arrays = _run_model(lm, enc, with_logits, with_attentions, with_hidden_states)
    attention_mask = enc["attention_mask"].bool()  # [batch, token]
    special = enc["special_tokens_mask"].bool() | ~attention_mask  # [batch, token]
    input_ids = enc["input_ids"]  # [batch, token]
    token_types = enc.get("token_type_ids", torch.zeros_like(input_ids))  # [batch, token]
    word_ids = [enc.word_ids(i) for i in range(n)]
    sequence_ids = [enc.sequence_ids(i) for i in range(n)]
    raw = [tok.convert_ids_to_tokens(ids) for ids in input_ids.tolist()]
    return BatchInspection(
        model_name=lm.name,
        indices=indices,
        texts=texts,
        text_pairs=list(pairs),
        input_ids=input_ids.numpy(),
        token_type_ids=token_types.numpy(),
        attention_mask=attention_mask.numpy(),
        special_mask=special.numpy(),
        word_ids=word_ids,
        sequence_ids=sequence_ids,
        offsets=[list(e.offsets) for e in enc.encodings],  # the fast tokenizer's own spans, free
        raw_tokens=raw,
        tokens=[
            readable_tokens(tok, input_ids[i].tolist(), word_ids[i], special[i].tolist())
            for i in range(n)
        ],
        **arrays,
        truncated=[o > lm.max_length for o in original],
        original_lengths=original,
    )


def inspect(
    lm: LoadedModel, text: str, text_pair: str | None = None, with_logits: bool = True
) -> Inspection:
    """Run ``text`` (and optionally segment B ``text_pair``) through ``lm`` once."""
    _check_text(text)
    if text_pair is not None:
        _check_text(text_pair, "second text")
    return _forward_batch(lm, [text], [text_pair], with_logits, [0]).item(0)


def inspect_batch(
    lm: LoadedModel,
    texts: Sequence[str],
    text_pairs: Sequence[str | None] | None = None,
    batch_size: int = 32,
    sort_by_length: bool = True,
    with_logits: bool = False,
    with_attentions: bool = True,
    with_hidden_states: bool = True,
) -> Iterator[BatchInspection]:
    """Stream padded batches over ``texts``; memory is bounded by one batch.

    With ``sort_by_length`` sentences of similar length share a batch (less padding); each
    batch's ``indices`` say where its rows were in ``texts``. ``with_attentions=False`` /
    ``with_hidden_states=False`` skip what a caller does not need (statistics stream faster).
    """
    texts = [_check_text(t, f"sentence {i + 1}") for i, t in enumerate(texts)]
    pairs = list(text_pairs) if text_pairs is not None else [None] * len(texts)
    if len(pairs) != len(texts):
        raise BertScopeError(f"{len(texts)} sentences but {len(pairs)} second texts.")
    if batch_size < 1:
        raise BertScopeError("The batch size must be at least 1.")
    order = list(range(len(texts)))
    if sort_by_length:
        order.sort(key=lambda i: len(texts[i]) + len(pairs[i] or ""))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        yield _forward_batch(
            lm, [texts[i] for i in idx], [pairs[i] for i in idx], with_logits, idx, with_attentions,
            with_hidden_states,
        )


def inspect_ids(
    lm: LoadedModel, template: Inspection, input_ids: Sequence[int], with_logits: bool = True
) -> Inspection:
    """Run ``input_ids`` in place of ``template``'s tokens (same length, segments and words).

    For inputs made by editing ids rather than text: masked words, BERT's corrupted inputs.
    """
    ids = torch.tensor([list(input_ids)], dtype=torch.long)  # [1, token]
    if ids.shape[1] != template.n_tokens:
        raise BertScopeError(f"{ids.shape[1]} ids given for {template.n_tokens} positions.")
    enc = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.from_numpy(template.token_type_ids[None].astype(np.int64)),
    }
    arrays = {k: (None if v is None else v[0]) for k, v in _run_model(lm, enc, with_logits).items()}
    raw = lm.tokenizer.convert_ids_to_tokens(ids[0].tolist())
    return replace(
        template,
        input_ids=ids[0].numpy(),
        raw_tokens=raw,
        tokens=readable_tokens(lm.tokenizer, ids[0].tolist(), template.word_ids, template.special_mask.tolist()),
        **arrays,
    )
