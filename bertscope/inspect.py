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

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Literal, NamedTuple, Sequence

import numpy as np
import torch

from .errors import BertScopeError
from .models import LoadedModel
from .tokens import readable_tokens

MAX_CHARS = 100_000  # beyond this even tokenising is wasteful: the model sees <= 512 tokens
PRECISIONS = {"float32": torch.float32, "float16": torch.float16}
LogitPositions = Sequence[int] | Literal["masks"] | None


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
    mlm_logits: np.ndarray | None  # [token, vocab] float32, when the model has an MLM head;
    # [len(logit_positions), vocab] when only some positions were asked for (use logits_at)
    nsp_logits: np.ndarray | None  # [2] float32 (IsNext, NotNext), when it has an NSP head and the
    # pass ran it (logits asked for, or a pair given); a pass without either runs the encoder alone
    truncated: bool
    original_length: int  # tokens before truncation, special tokens included
    warnings: tuple[str, ...]
    logit_positions: tuple[int, ...] | None = None  # rows kept in mlm_logits; None = every token
    sop_logits: np.ndarray | None = None  # [2] float32 (in order, swapped): ALBERT's sentence-order head,
    # when the checkpoint has it and a pair was given (Lan et al. 2020, §4.1)

    def logits_at(self, position: int) -> np.ndarray:
        """The MLM logits [vocab] at token ``position``, however many rows were kept."""
        if self.mlm_logits is None:
            raise BertScopeError("This result has no masked-LM logits.")
        if self.logit_positions is None:
            return self.mlm_logits[position]
        if position not in self.logit_positions:
            raise BertScopeError(f"Logits were kept only at positions {list(self.logit_positions)}.")
        return self.mlm_logits[self.logit_positions.index(position)]

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


class TokenRow(NamedTuple):
    """One row of a batch as the tokenizer left it, padding included: what locating words
    needs, without spelling tokens out. Positions index the padded row (the device tensors)."""

    text: str
    offsets: list[tuple[int, int]]  # (0, 0) for special and pad tokens
    sequence_ids: list[int | None]  # None for special and pad tokens
    word_ids: list[int | None]


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
    attentions: np.ndarray | None  # [batch, layer, head, query, key]; pad keys get 0 weight;
    # None when the batch was run with with_attentions=False
    hidden_states: np.ndarray | None  # [batch, layer + 1, token, dim]; None if not asked for
    mlm_logits: np.ndarray | None  # [batch, token, vocab]; with logit_positions, [rows kept, vocab]
    nsp_logits: np.ndarray | None  # [batch, 2]
    truncated: list[bool]
    original_lengths: list[int]
    logit_positions: list[tuple[int, ...]] | None = None  # per row: positions kept, in order
    sop_logits: np.ndarray | None = None  # [batch, 2] (in order, swapped), ALBERT's SOP head
    # token strings are spelled out only when read (statistics over a corpus never read them)
    tokenizer: Any = field(default=None, repr=False)
    _strings: dict = field(default_factory=dict, repr=False)

    def row(self, i: int) -> TokenRow:
        return TokenRow(self.texts[i], self.offsets[i], self.sequence_ids[i], self.word_ids[i])

    def _row_strings(self, i: int) -> tuple[list[str], list[str]]:
        """(raw, readable) tokens of row ``i``, padding included; memoised."""
        if i not in self._strings:
            ids = self.input_ids[i].tolist()
            self._strings[i] = (self.tokenizer.convert_ids_to_tokens(ids),
                                readable_tokens(self.tokenizer, ids, self.word_ids[i], self.special_mask[i].tolist()))
        return self._strings[i]

    @property
    def raw_tokens(self) -> list[list[str]]:  # per row, as the tokenizer spells them
        return [self._row_strings(i)[0] for i in range(len(self))]

    @property
    def tokens(self) -> list[list[str]]:  # per row, readable ("##" continues a word)
        return [self._row_strings(i)[1] for i in range(len(self))]

    @property
    def lengths(self) -> np.ndarray:  # [batch] real tokens per row
        return self.attention_mask.sum(axis=1)

    def __len__(self) -> int:
        return len(self.texts)

    def item(self, i: int) -> Inspection:
        keep = np.flatnonzero(self.attention_mask[i])  # [token] real positions (any pad side)
        cut = lambda seq: [seq[j] for j in keep]  # noqa: E731
        raw, readable = self._row_strings(i)
        logit_positions = None
        if self.mlm_logits is None:
            logits = None
        elif self.logit_positions is None:
            logits = self.mlm_logits[i, keep]
        else:  # rows of every item, in item order; positions counted after cutting padding
            first = sum(len(p) for p in self.logit_positions[:i])
            logits = self.mlm_logits[first:first + len(self.logit_positions[i])]
            where = {int(j): n for n, j in enumerate(keep)}
            logit_positions = tuple(where[p] for p in self.logit_positions[i])
        return Inspection(
            model_name=self.model_name,
            text=self.texts[i],
            text_pair=self.text_pairs[i],
            tokens=cut(readable),
            raw_tokens=cut(raw),
            input_ids=self.input_ids[i, keep],
            token_type_ids=self.token_type_ids[i, keep],
            word_ids=cut(self.word_ids[i]),
            sequence_ids=cut(self.sequence_ids[i]),
            special_mask=self.special_mask[i, keep],
            offsets=cut(self.offsets[i]),
            attentions=None if self.attentions is None else self.attentions[i][:, :, keep][:, :, :, keep],
            hidden_states=None if self.hidden_states is None else self.hidden_states[i][:, keep],
            mlm_logits=logits,
            nsp_logits=None if self.nsp_logits is None else self.nsp_logits[i],
            sop_logits=None if self.sop_logits is None else self.sop_logits[i],
            truncated=self.truncated[i],
            original_length=self.original_lengths[i],
            warnings=_truncation_warning(self.truncated[i], self.original_lengths[i], len(keep)),
            logit_positions=logit_positions,
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


def _numpy(t: torch.Tensor, dtype: torch.dtype = torch.float32) -> np.ndarray:
    """One transfer: cast on the model's device (half the bytes for float16), then copy."""
    return t.detach().to(dtype).cpu().numpy()


def _logit_rows(lm: LoadedModel, input_ids: torch.Tensor, positions: LogitPositions) -> torch.Tensor | None:
    """[batch, token] bool: where MLM logits are kept (None = everywhere)."""
    if positions is None:
        return None
    if isinstance(positions, str):
        if positions != "masks":
            raise BertScopeError(f"Unknown logit positions {positions!r}: use 'masks' or a list of positions.")
        return input_ids == lm.tokenizer.mask_token_id
    rows = torch.zeros_like(input_ids, dtype=torch.bool)
    for p in positions:
        if not 0 <= int(p) < input_ids.shape[1]:
            raise BertScopeError(f"Position {p} does not exist: the input has {input_ids.shape[1]} tokens.")
        rows[:, int(p)] = True
    return rows


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Copy a CPU tensor to ``device`` without making the host wait for queued GPU work: from
    pinned memory the copy is queued like a kernel (from pageable memory CUDA first drains
    the stream, which would serialise tokenising the next batch behind this one's pass)."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _device_pass(lm: LoadedModel, enc: Any, with_attentions: bool, with_hidden_states: bool,
                 with_logits: bool = True) -> Any:
    """The one forward pass; its outputs stay on the model's device. Without logits only the
    encoder runs: the MLM head's [token, vocab] product is a quarter of BERT-base's work."""
    feed = {k: to_device(enc[k], lm.device) for k in lm.tokenizer.model_input_names if k in enc}
    module = lm.model if with_logits else lm.model.base_model
    # bounded concurrent passes per shared model; eager only when weights are returned
    with lm.guard, lm.attention_kernel(with_attentions), torch.inference_mode():
        return module(**feed, output_attentions=with_attentions,
                      output_hidden_states=with_hidden_states, return_dict=True)


def _to_arrays(lm: LoadedModel, out: Any, with_logits: bool, logit_rows: torch.Tensor | None,
               precision: str) -> dict[str, np.ndarray | None]:
    """Model outputs -> CPU arrays, batch first: stacked and cast on the device, then one
    transfer per output; MLM logits only at ``logit_rows`` ([batch, token] bool) when given."""
    if precision not in PRECISIONS:
        raise BertScopeError(f"Unknown precision {precision!r}: use float32 or float16.")
    with torch.inference_mode():
        logits = getattr(out, "prediction_logits", None)
        if logits is None:
            logits = getattr(out, "logits", None)
        keep_logits = with_logits and logits is not None and "mlm" in lm.heads
        if keep_logits and logit_rows is not None:
            logits = logits[logit_rows.to(logits.device)]  # [rows kept, vocab], item by item
        nsp = getattr(out, "seq_relationship_logits", None)
        sop = getattr(out, "sop_logits", None)
        return {
            "attentions": None if out.attentions is None else
            _numpy(torch.stack(out.attentions, dim=1), PRECISIONS[precision]),  # [batch, layer, head, q, k]
            "hidden_states": None if out.hidden_states is None else
            _numpy(torch.stack(out.hidden_states, dim=1)),  # [batch, layer + 1, token, dim]
            "mlm_logits": _numpy(logits) if keep_logits else None,
            "nsp_logits": _numpy(nsp) if (nsp is not None and "nsp" in lm.heads) else None,  # [batch, 2]
            "sop_logits": _numpy(sop) if (sop is not None and "sop" in lm.heads) else None,  # [batch, 2]
        }


def _run_model(
    lm: LoadedModel, enc: Any, with_logits: bool, with_attentions: bool = True,
    with_hidden_states: bool = True, logit_rows: torch.Tensor | None = None,
    precision: str = "float32",
) -> dict[str, np.ndarray | None]:
    """The one forward pass: model inputs -> CPU arrays (see ``_to_arrays``)."""
    if precision not in PRECISIONS:  # before the pass, not after it
        raise BertScopeError(f"Unknown precision {precision!r}: use float32 or float16.")
    # the heads run when MLM logits are asked for, or NSP/SOP can be read (a pair, a model with the head)
    pair = bool((enc.get("token_type_ids", torch.zeros(1)) > 0).any())
    heads = with_logits or (bool({"nsp", "sop"} & lm.heads) and pair)
    out = _device_pass(lm, enc, with_attentions, with_hidden_states, heads)
    return _to_arrays(lm, out, with_logits, logit_rows, precision)


def _encode(lm: LoadedModel, texts: list[str], pairs: list[str | None]) -> tuple[Any, list[int]]:
    """Padded encodings (truncated to the model's maximum) and each row's length before that."""
    has_pairs = any(p is not None for p in pairs)
    if has_pairs and any(p is None for p in pairs):
        raise BertScopeError("Give a second text for every sentence of a batch, or for none.")
    second = pairs if has_pairs else None
    options = dict(
        add_special_tokens=True, padding=True, return_tensors="pt", return_special_tokens_mask=True,
    )
    enc = lm.tokenizer(texts, second, truncation=False, **options)
    original = enc["attention_mask"].sum(dim=1).tolist()
    if max(original) > lm.max_length:  # tokenise again only when something must be cut
        enc = lm.tokenizer(texts, second, truncation=True, max_length=lm.max_length, **options)
    return enc, original


def _describe(lm: LoadedModel, enc: Any, texts: list[str], pairs: list[str | None], indices: list[int],
              original: list[int], arrays: dict | None = None, rows: torch.Tensor | None = None
              ) -> BatchInspection:
    """The batch's tokens, ids and masks (CPU), with ``arrays`` from the pass when given."""
    tok = lm.tokenizer
    arrays = arrays or {"attentions": None, "hidden_states": None, "mlm_logits": None, "nsp_logits": None,
                        "sop_logits": None}
    attention_mask = enc["attention_mask"].bool()  # [batch, token]
    special = enc["special_tokens_mask"].bool() | ~attention_mask  # [batch, token]
    input_ids = enc["input_ids"]  # [batch, token]
    token_types = enc.get("token_type_ids", torch.zeros_like(input_ids))  # [batch, token]
    return BatchInspection(
        model_name=lm.name,
        indices=indices,
        texts=texts,
        text_pairs=list(pairs),
        input_ids=input_ids.numpy(),
        token_type_ids=token_types.numpy(),
        attention_mask=attention_mask.numpy(),
        special_mask=special.numpy(),
        word_ids=[e.word_ids for e in enc.encodings],
        sequence_ids=[e.sequence_ids for e in enc.encodings],
        offsets=[e.offsets for e in enc.encodings],  # the fast tokenizer's own spans, free
        **arrays,
        truncated=[o > lm.max_length for o in original],
        original_lengths=original,
        logit_positions=None if rows is None or arrays["mlm_logits"] is None else
        [tuple(int(j) for j in torch.nonzero(r).flatten().tolist()) for r in rows],
        tokenizer=tok,
    )


def _forward_batch(
    lm: LoadedModel,
    texts: list[str],
    pairs: list[str | None],
    with_logits: bool,
    indices: list[int],
    with_attentions: bool = True,
    with_hidden_states: bool = True,
    logit_positions: LogitPositions = None,
    precision: str = "float32",
) -> BatchInspection:
    enc, original = _encode(lm, texts, pairs)
    rows = _logit_rows(lm, enc["input_ids"], logit_positions) if with_logits else None
    arrays = _run_model(lm, enc, with_logits, with_attentions, with_hidden_states, rows, precision)
    return _describe(lm, enc, texts, pairs, indices, original, arrays, rows)


def inspect(
    lm: LoadedModel, text: str, text_pair: str | None = None, with_logits: bool = True,
    with_attentions: bool = True, with_hidden_states: bool = True,
    logit_positions: LogitPositions = None, precision: str = "float32",
) -> Inspection:
    """Run ``text`` (and optionally segment B ``text_pair``) through ``lm`` once.

    Ask only for what you use: ``with_attentions``/``with_hidden_states``/``with_logits``;
    ``logit_positions`` ("masks" or token positions) keeps MLM logits only there (a full
    [token, vocab] block is 512 MB for XLM-R at 512 tokens); ``precision="float16"`` halves
    the attentions (a view's 3 decimals survive it). Read logits with ``logits_at``.
    """
    _check_text(text)
    if text_pair is not None:
        _check_text(text_pair, "second text")
    return _forward_batch(lm, [text], [text_pair], with_logits, [0], with_attentions, with_hidden_states,
                          logit_positions, precision).item(0)


DEFAULT_BATCH_BYTES = 512 * 2**20  # outputs of one batch (attentions dominate at 512 tokens)


def output_bytes(lm: LoadedModel, tokens: int, with_attentions: bool, with_hidden_states: bool,
                 with_logits: bool) -> int:
    """Bytes of float32 outputs for one padded row of ``tokens`` tokens."""
    size = 0
    if with_attentions:
        size += lm.num_layers * lm.num_heads * tokens * tokens * 4  # [layer, head, q, k]
    if with_hidden_states:
        size += (lm.num_layers + 1) * tokens * lm.hidden_size * 4  # [layer + 1, token, dim]
    if with_logits and "mlm" in lm.heads:
        size += tokens * lm.vocab_size * 4  # [token, vocab]
    return size


def plan_batches(lengths: Sequence[int], row_bytes, batch_size: int, max_batch_bytes: int) -> list[list[int]]:
    """Indices grouped in length order; a batch grows while its padded outputs fit the budget
    (``row_bytes(length)`` per row) and it has fewer than ``batch_size`` rows. A single row
    over the budget still runs, alone."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:  # ascending, so the newest row sets the padded length
        if current and (len(current) >= batch_size or (len(current) + 1) * row_bytes(lengths[i]) > max_batch_bytes):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def _plan(lm: LoadedModel, texts: Sequence[str], text_pairs: Sequence[str | None] | None, batch_size: int,
          sort_by_length: bool, max_batch_bytes: int, row_bytes) -> tuple[list[str], list, list[list[int]]]:
    texts = [_check_text(t, f"sentence {i + 1}") for i, t in enumerate(texts)]
    pairs = list(text_pairs) if text_pairs is not None else [None] * len(texts)
    if len(pairs) != len(texts):
        raise BertScopeError(f"{len(texts)} sentences but {len(pairs)} second texts.")
    if any(p is not None for p in pairs) and any(p is None for p in pairs):
        raise BertScopeError("Give a second text for every sentence of a batch, or for none.")
    if batch_size < 1:
        raise BertScopeError("The batch size must be at least 1.")
    if not texts:
        return texts, pairs, []
    if not sort_by_length:
        return texts, pairs, [list(range(s, min(s + batch_size, len(texts)))) for s in range(0, len(texts), batch_size)]
    second = pairs if any(p is not None for p in pairs) else None
    enc = lm.tokenizer(texts, second, add_special_tokens=True, truncation=True, max_length=lm.max_length)
    lengths = [len(ids) for ids in enc["input_ids"]]
    return texts, pairs, plan_batches(lengths, row_bytes, batch_size, max_batch_bytes)


def inspect_batch(
    lm: LoadedModel,
    texts: Sequence[str],
    text_pairs: Sequence[str | None] | None = None,
    batch_size: int = 32,
    sort_by_length: bool = True,
    with_logits: bool = False,
    with_attentions: bool = True,
    with_hidden_states: bool = True,
    max_batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> Iterator[BatchInspection]:
    """Stream padded batches over ``texts``; memory is bounded by one batch.

    With ``sort_by_length`` sentences of similar token length share a batch (less padding),
    and a batch holds at most ``batch_size`` rows and about ``max_batch_bytes`` of outputs
    (BERT-large's attentions at 512 tokens are 400 MB a sentence); each batch's ``indices``
    say where its rows were in ``texts``. ``with_attentions=False`` /
    ``with_hidden_states=False`` skip what a caller does not need (statistics stream faster).
    """
    row = lambda n: output_bytes(lm, n, with_attentions, with_hidden_states, with_logits)  # noqa: E731
    texts, pairs, batches = _plan(lm, texts, text_pairs, batch_size, sort_by_length, max_batch_bytes, row)
    for idx in batches:
        yield _forward_batch(
            lm, [texts[i] for i in idx], [pairs[i] for i in idx], with_logits, idx, with_attentions,
            with_hidden_states,
        )


def device_batches(
    lm: LoadedModel,
    texts: Sequence[str],
    text_pairs: Sequence[str | None] | None = None,
    batch_size: int = 32,
    with_attentions: bool = True,
    with_hidden_states: bool = False,
    max_batch_bytes: int = DEFAULT_BATCH_BYTES,
    sort_by_length: bool = True,
) -> Iterator[tuple[BatchInspection, Any]]:
    """Like ``inspect_batch``, but the model's outputs stay on its device, for reductions
    there (corpus statistics): yields (batch without arrays, the Hugging Face output whose
    ``attentions``/``hidden_states`` are tuples of per-layer tensors on ``lm.device``)."""
    row = lambda n: output_bytes(lm, n, with_attentions, with_hidden_states, False)  # noqa: E731
    texts, pairs, batches = _plan(lm, texts, text_pairs, batch_size, sort_by_length, max_batch_bytes, row)
    for idx in batches:
        chosen_texts, chosen_pairs = [texts[i] for i in idx], [pairs[i] for i in idx]
        enc, original = _encode(lm, chosen_texts, chosen_pairs)
        out = _device_pass(lm, enc, with_attentions, with_hidden_states, with_logits=False)
        yield _describe(lm, enc, chosen_texts, chosen_pairs, idx, original), out


@dataclass(frozen=True)
class PoolingPlan:
    """Which token rows make each pooled vector: entry j adds ``weight[j]`` x the hidden state
    of (``row[j]``, ``token[j]``) to vector ``example[j]``. Mean pooling of a word's pieces is
    one entry per piece with weight 1/pieces; first-piece or [CLS] pooling is one entry."""

    n_examples: int
    example: np.ndarray  # [entry] int
    row: np.ndarray  # [entry] int, row in the batch
    token: np.ndarray  # [entry] int, position in that row
    weight: np.ndarray  # [entry] float32

    @staticmethod
    def from_groups(groups: Sequence[tuple[int, Sequence[int], str]]) -> "PoolingPlan":
        """(row, token positions, "mean" | "first") per example, in example order."""
        example, row, token, weight = [], [], [], []
        for j, (b, positions, pooling) in enumerate(groups):
            chosen = list(positions)[:1] if pooling in ("first", "cls") else list(positions)
            for p in chosen:
                example.append(j), row.append(b), token.append(p), weight.append(1.0 / len(chosen))
        return PoolingPlan(len(groups), np.array(example, np.int64), np.array(row, np.int64),
                           np.array(token, np.int64), np.array(weight, np.float32))


def to_host_async(t: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """Start copying ``t`` to the CPU; returns (host tensor, event to wait on before reading
    it, or None when the copy is already done). On a GPU the copy goes to pinned memory and
    the host does not wait, so it can prepare the next batch meanwhile."""
    if t.device.type != "cuda":
        return t.cpu(), None
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    done = torch.cuda.Event()
    done.record()
    return host, done


def pooled_hidden_states(
    lm: LoadedModel,
    texts: Sequence[str],
    plan_of: Callable[[BatchInspection], PoolingPlan],
    batch_size: int = 32,
    sort_by_length: bool = True,
    max_batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> Iterator[tuple[BatchInspection, np.ndarray]]:
    """Hidden states pooled where they are: for each batch, ``plan_of(batch)`` says which token
    rows make each vector; the weighted sums run on the model's device (float32), and only
    the pooled [example, layer + 1, dim] array crosses to the CPU, one batch behind, so the
    next batch is tokenised and queued while the device works. The pass uses the fast
    attention kernel (no weights are returned) and the encoder alone."""
    pending = None  # (batch, host tensor, event) whose copy is under way
    for batch, out in device_batches(lm, texts, None, batch_size, with_attentions=False, with_hidden_states=True,
                                     max_batch_bytes=max_batch_bytes, sort_by_length=sort_by_length):
        plan = plan_of(batch)
        if plan.n_examples == 0:
            current = (batch, torch.zeros(0, lm.num_layers + 1, lm.hidden_size), None)
        else:
            with torch.inference_mode():
                device = out.hidden_states[0].device
                width = out.hidden_states[0].shape[1]
                flat = to_device(torch.from_numpy(plan.row * width + plan.token), device)  # [entry]
                example = to_device(torch.from_numpy(plan.example), device)  # [entry]
                weight = to_device(torch.from_numpy(plan.weight), device)[:, None]  # [entry, 1]
                layers = []
                for h in out.hidden_states:  # [batch, token, dim], one layer at a time
                    rows = h.reshape(-1, h.shape[-1])[flat].float() * weight  # [entry, dim]
                    layers.append(torch.zeros(plan.n_examples, h.shape[-1], device=device).index_add_(0, example, rows))
                current = (batch, *to_host_async(torch.stack(layers, dim=1)))  # [example, layer + 1, dim]
        del out
        if pending is not None:
            yield _collect(pending)
        pending = current
    if pending is not None:
        yield _collect(pending)


def _collect(pending: tuple[BatchInspection, torch.Tensor, Any]) -> tuple[BatchInspection, np.ndarray]:
    batch, host, done = pending
    if done is not None:
        done.synchronize()
    return batch, host.numpy().copy()  # a plain array: the pinned buffer goes back at once


def inspect_ids(
    lm: LoadedModel, template: Inspection, input_ids: Sequence[int], with_logits: bool = True,
    with_attentions: bool = True, with_hidden_states: bool = True, logit_positions: LogitPositions = None,
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
    rows = _logit_rows(lm, ids, logit_positions) if with_logits else None
    out = _run_model(lm, enc, with_logits, with_attentions, with_hidden_states, rows)
    arrays = {k: (None if v is None or (k == "mlm_logits" and rows is not None) else v[0]) for k, v in out.items()}
    kept = None
    if rows is not None and out["mlm_logits"] is not None:
        arrays["mlm_logits"] = out["mlm_logits"]  # [rows kept, vocab]
        kept = tuple(int(j) for j in torch.nonzero(rows[0]).flatten().tolist())
    raw = lm.tokenizer.convert_ids_to_tokens(ids[0].tolist())
    return replace(
        template,
        input_ids=ids[0].numpy(),
        raw_tokens=raw,
        tokens=readable_tokens(lm.tokenizer, ids[0].tolist(), template.word_ids, template.special_mask.tolist()),
        **arrays,
        logit_positions=kept,
    )
