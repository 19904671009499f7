"""One forward pass -> one typed result.

    >>> from bertscope import load_model, inspect
    >>> lm = load_model("bundled")
    >>> r = inspect(lm, "The bank of the river.")
    >>> r.tokens[:3], r.attentions.shape          # [layer, head, query, key]
    (['[CLS]', 'the', 'bank'], (6, 12, 8, 8))

Everything handed out is CPU float32 numpy, so analysis code never touches torch or the
device. ``inspect_batch`` runs many sentences with padding; each ``BatchInspection`` keeps
the attention mask, and ``BatchInspection.item(i)`` returns sentence ``i`` with the padding
cut away, so no statistic built on it can count a pad token.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Literal, NamedTuple, Sequence

import numpy as np
import torch

from bertscope.core.hooked_pass import check_text
from bertscope.core.inspection import BatchInspection, Inspection
from bertscope.core.models import LoadedModel
from bertscope.core.tokens import readable_tokens
from bertscope.errors import BertScopeError
from bertscope.runtime.devices import to_device

PRECISIONS = {"float32": torch.float32, "float16": torch.float16}
LogitPositions = Sequence[int] | Literal["masks"] | None


NUMPY_DTYPES = {torch.float32: np.float32, torch.float16: np.float16}


def _numpy(t: torch.Tensor, dtype: torch.dtype = torch.float32) -> np.ndarray:
    """One transfer: cast on the model's device (half the bytes for float16), then copy into an
    array numpy allocated. From a GPU that matters: ``.cpu()`` lands in fresh 4 KiB pages that the
    copy faults in one by one (2.3 GB/s measured on an H200 for a batch's 10 MB of attentions),
    while numpy asks the kernel for huge pages for buffers of 4 MiB and more."""
    t = t.detach().to(dtype)
    if t.device.type == "cpu" or dtype not in NUMPY_DTYPES:
        return t.cpu().numpy()
    host = np.empty(tuple(t.shape), NUMPY_DTYPES[dtype])
    torch.from_numpy(host).copy_(t)
    return host


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


def device_pass(lm: LoadedModel, enc: Any, with_attentions: bool, with_hidden_states: bool,
                 with_logits: bool = True) -> Any:
    """The one forward pass; its outputs stay on the model's device. Without logits only the
    encoder runs: the MLM head's [token, vocab] product is a quarter of BERT-base's work."""
    feed = {k: to_device(enc[k], lm.device) for k in lm.tokenizer.model_input_names if k in enc}
    # through the owner: bounded concurrent passes per shared model; eager only when weights are returned
    return lm.run(feed, attentions=with_attentions, hidden_states=with_hidden_states, encoder_only=not with_logits)


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
        keep_logits = with_logits and logits is not None and "mlm" in lm.outputs
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
            "nsp_logits": _numpy(nsp) if (nsp is not None and "nsp" in lm.outputs) else None,  # [batch, 2]
            "sop_logits": _numpy(sop) if (sop is not None and "sop" in lm.outputs) else None,  # [batch, 2]
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
    heads = with_logits or (bool({"nsp", "sop"} & lm.outputs) and pair)
    out = device_pass(lm, enc, with_attentions, with_hidden_states, heads)
    return _to_arrays(lm, out, with_logits, logit_rows, precision)


class Tokenized(NamedTuple):
    """Texts tokenised once: the fast tokenizer's own ``Encoding`` of each row (cut to the model's
    maximum) and each row's length before the cut. Batches are padded from these, so a stream
    sorted by length tokenises every text once, not once to sort and again per batch."""

    encodings: list  # tokenizers.Encoding per row, special tokens included, not padded
    original: list[int]  # tokens before truncation, special tokens included


def tokenize(lm: LoadedModel, texts: list[str], pairs: list[str | None]) -> Tokenized:
    """Every text (and its pair) tokenised in one call; only rows over the model's maximum are
    tokenised again, cut (rare), so transformers never warns about a length it will not see."""
    has_pairs = any(p is not None for p in pairs)
    if has_pairs and any(p is None for p in pairs):
        raise BertScopeError("Give a second text for every sentence of a batch, or for none.")
    second = list(pairs) if has_pairs else None
    if not texts:
        return Tokenized([], [])
    options = dict(add_special_tokens=True, return_attention_mask=False, return_token_type_ids=False, verbose=False)
    encodings = list(lm.tokenizer(list(texts), second, truncation=False, **options).encodings)
    original = [len(e.ids) for e in encodings]
    long = [i for i, n in enumerate(original) if n > lm.max_length]
    if long:
        cut = lm.tokenizer([texts[i] for i in long], [second[i] for i in long] if second else None,
                           truncation=True, max_length=lm.max_length, **options).encodings
        for i, e in zip(long, cut):
            encodings[i] = e
    return Tokenized(encodings, original)


class Padded(NamedTuple):
    """One padded batch on the host: the model's inputs and what locating words needs."""

    feed: dict[str, torch.Tensor]  # input_ids, attention_mask, token_type_ids: [batch, token] int64
    special: np.ndarray  # [batch, token] bool: special tokens and padding
    word_ids: list[list[int | None]]  # per row, padded positions None
    sequence_ids: list[list[int | None]]
    offsets: list[list[tuple[int, int]]]  # (0, 0) for special and pad tokens
    original: list[int]  # tokens before truncation


def pad(lm: LoadedModel, tokenized: Tokenized, rows: Sequence[int]) -> Padded:
    """Rows ``rows`` of ``tokenized`` padded to the longest of them, on the tokenizer's padding side."""
    tok = lm.tokenizer
    chosen = [tokenized.encodings[i] for i in rows]
    n, width = len(chosen), max(len(e.ids) for e in chosen)
    ids = np.full((n, width), tok.pad_token_id if tok.pad_token_id is not None else 0, np.int64)  # [batch, token]
    types = np.full((n, width), getattr(tok, "pad_token_type_id", 0) or 0, np.int64)  # [batch, token]
    mask = np.zeros((n, width), np.int64)  # [batch, token]
    special = np.ones((n, width), bool)  # [batch, token]
    left = getattr(tok, "padding_side", "right") == "left"
    word_ids, sequence_ids, offsets = [], [], []
    for r, e in enumerate(chosen):
        k = len(e.ids)
        gap = width - k
        at = slice(gap, width) if left else slice(0, k)
        ids[r, at], types[r, at], mask[r, at], special[r, at] = e.ids, e.type_ids, 1, e.special_tokens_mask
        for store, values, filler in ((word_ids, e.word_ids, None), (sequence_ids, e.sequence_ids, None),
                                      (offsets, e.offsets, (0, 0))):
            store.append([filler] * gap + values if left else values + [filler] * gap)
    feed = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
            "token_type_ids": torch.from_numpy(types)}
    return Padded(feed, special, word_ids, sequence_ids, offsets, [tokenized.original[i] for i in rows])


def _describe(lm: LoadedModel, padded: Padded, texts: list[str], pairs: list[str | None], indices: list[int],
              arrays: dict | None = None, rows: torch.Tensor | None = None) -> BatchInspection:
    """The batch's tokens, ids and masks (CPU), with ``arrays`` from the pass when given."""
    arrays = arrays or {"attentions": None, "hidden_states": None, "mlm_logits": None, "nsp_logits": None,
                        "sop_logits": None}
    attention_mask = padded.feed["attention_mask"].numpy().astype(bool)  # [batch, token]
    return BatchInspection(
        model_name=lm.name,
        indices=indices,
        texts=texts,
        text_pairs=list(pairs),
        input_ids=padded.feed["input_ids"].numpy(),
        token_type_ids=padded.feed["token_type_ids"].numpy(),
        attention_mask=attention_mask,
        special_mask=padded.special | ~attention_mask,
        word_ids=padded.word_ids,
        sequence_ids=padded.sequence_ids,
        offsets=padded.offsets,  # the fast tokenizer's own spans, free
        **arrays,
        truncated=[o > lm.max_length for o in padded.original],
        original_lengths=padded.original,
        logit_positions=None if rows is None or arrays["mlm_logits"] is None else
        [tuple(int(j) for j in torch.nonzero(r).flatten().tolist()) for r in rows],
        tokenizer=lm.tokenizer,
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
    tokenized: Tokenized | None = None,
    padded: Padded | None = None,
) -> BatchInspection:
    """One batch through the model: ``padded`` inputs when given, else ``texts`` tokenised now."""
    if padded is None and tokenized is None:
        tokenized = tokenize(lm, texts, pairs)
    padded = pad(lm, tokenized, range(len(texts))) if padded is None else padded
    rows = _logit_rows(lm, padded.feed["input_ids"], logit_positions) if with_logits else None
    arrays = _run_model(lm, padded.feed, with_logits, with_attentions, with_hidden_states, rows, precision)
    return _describe(lm, padded, texts, pairs, indices, arrays, rows)


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
    check_text(text)
    if text_pair is not None:
        check_text(text_pair, "second text")
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
    if with_logits and "mlm" in lm.outputs:
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
          sort_by_length: bool, max_batch_bytes: int, row_bytes, plan: Sequence[Sequence[int]] | None = None,
          ) -> tuple[list[str], list, Tokenized, list[list[int]]]:
    """(texts, pairs, every row tokenised once, batches of row indices): ``plan``'s batches when
    given (a caller that planned a corpus once and hands out its batches: the Ray engine)."""
    texts = [check_text(t, f"sentence {i + 1}") for i, t in enumerate(texts)]
    pairs = list(text_pairs) if text_pairs is not None else [None] * len(texts)
    if len(pairs) != len(texts):
        raise BertScopeError(f"{len(texts)} sentences but {len(pairs)} second texts.")
    if batch_size < 1:
        raise BertScopeError("The batch size must be at least 1.")
    tokenized = tokenize(lm, texts, pairs)
    if plan is not None:
        return texts, pairs, tokenized, [list(map(int, batch)) for batch in plan]
    if not sort_by_length:
        chunks = [list(range(s, min(s + batch_size, len(texts)))) for s in range(0, len(texts), batch_size)]
        return texts, pairs, tokenized, chunks
    lengths = [len(e.ids) for e in tokenized.encodings]
    return texts, pairs, tokenized, plan_batches(lengths, row_bytes, batch_size, max_batch_bytes)


def corpus_plan(lm: LoadedModel, texts: Sequence[str], batch_size: int, with_attentions: bool,
                with_hidden_states: bool, max_batch_bytes: int = DEFAULT_BATCH_BYTES) -> list[list[int]]:
    """The batches ``device_batches`` runs over ``texts`` (sorted by length, bounded by rows and
    bytes): planned once for a corpus whose batches are then run elsewhere (one Ray actor each)."""
    row = lambda n: output_bytes(lm, n, with_attentions, with_hidden_states, False)  # noqa: E731
    return _plan(lm, texts, None, batch_size, True, max_batch_bytes, row)[3]


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
    Every text is tokenised once.
    """
    row = lambda n: output_bytes(lm, n, with_attentions, with_hidden_states, with_logits)  # noqa: E731
    texts, pairs, tokenized, batches = _plan(lm, texts, text_pairs, batch_size, sort_by_length, max_batch_bytes,
                                             row)
    for idx in batches:
        yield _forward_batch(
            lm, [texts[i] for i in idx], [pairs[i] for i in idx], with_logits, idx, with_attentions,
            with_hidden_states, padded=pad(lm, tokenized, idx),
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
    plan: Sequence[Sequence[int]] | None = None,
) -> Iterator[tuple[BatchInspection, Any]]:
    """Like ``inspect_batch``, but the model's outputs stay on its device, for reductions
    there (corpus statistics): yields (batch without arrays, the Hugging Face output whose
    ``attentions``/``hidden_states`` are tuples of per-layer tensors on ``lm.device``). ``plan``:
    batches of indices into ``texts`` to run as they are (``corpus_plan`` made them)."""
    row = lambda n: output_bytes(lm, n, with_attentions, with_hidden_states, False)  # noqa: E731
    texts, pairs, tokenized, batches = _plan(lm, texts, text_pairs, batch_size, sort_by_length, max_batch_bytes,
                                             row, plan)
    for idx in batches:
        padded = pad(lm, tokenized, idx)
        out = device_pass(lm, padded.feed, with_attentions, with_hidden_states, with_logits=False)
        yield _describe(lm, padded, [texts[i] for i in idx], [pairs[i] for i in idx], idx), out


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


POOL_BYTES = 64 * 2**20  # float32 hidden states of the layers pooled in one product


def pool_layers(hidden_states: Sequence[torch.Tensor], plan: PoolingPlan) -> torch.Tensor:
    """[example, layer + 1, dim] float32 on the states' device: ``plan``'s weighted sums for every
    layer at once. The plan is a sparse [example, batch x token] matrix (one row per vector, its
    weights on that vector's pieces), and each group of layers is one product with the stacked
    [batch x token, layers x dim] states: a handful of kernels a batch instead of four per layer,
    which is what a GPU is waiting on when batches are short."""
    b, t, d = hidden_states[0].shape  # each [batch, token, dim]
    device = hidden_states[0].device
    if device.type not in ("cpu", "cuda"):  # no sparse products there (mps): one gather and sum per layer
        flat = to_device(torch.from_numpy(plan.row * t + plan.token), device)  # [entry]
        example = to_device(torch.from_numpy(plan.example), device)  # [entry]
        weight = to_device(torch.from_numpy(plan.weight), device)[:, None]  # [entry, 1]
        return torch.stack([torch.zeros(plan.n_examples, d, device=device).index_add_(
            0, example, h.reshape(-1, d)[flat].float() * weight) for h in hidden_states], dim=1)
    if len(plan.example) > 1 and (np.diff(plan.example) < 0).any():  # rows of a CSR matrix come in order
        order = np.argsort(plan.example, kind="stable")
        plan = PoolingPlan(plan.n_examples, plan.example[order], plan.row[order], plan.token[order], plan.weight[order])
    counts = np.bincount(plan.example, minlength=plan.n_examples)  # [example] entries of each
    crow = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)  # [example + 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        weights = torch.sparse_csr_tensor(  # [example, batch x token]
            to_device(torch.from_numpy(crow), device), to_device(torch.from_numpy(plan.row * t + plan.token), device),
            to_device(torch.from_numpy(plan.weight), device), size=(plan.n_examples, b * t), check_invariants=False)
        per = max(1, POOL_BYTES // max(1, b * t * d * 4))
        parts = []
        for start in range(0, len(hidden_states), per):
            group = torch.stack(hidden_states[start:start + per], dim=2).float()  # [batch, token, layers, dim]
            parts.append((weights @ group.reshape(b * t, -1)).reshape(plan.n_examples, -1, d))  # [example, layers, dim]
    return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]


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
    plan: Sequence[Sequence[int]] | None = None,
) -> Iterator[tuple[BatchInspection, np.ndarray]]:
    """Hidden states pooled where they are: for each batch, ``plan_of(batch)`` says which token
    rows make each vector; the weighted sums run on the model's device (float32), and only
    the pooled [example, layer + 1, dim] array crosses to the CPU, one batch behind, so the
    next batch is tokenised and queued while the device works. The pass uses the fast
    attention kernel (no weights are returned) and the encoder alone."""
    pending = None  # (batch, host tensor, event) whose copy is under way
    for batch, out in device_batches(lm, texts, None, batch_size, with_attentions=False, with_hidden_states=True,
                                     max_batch_bytes=max_batch_bytes, sort_by_length=sort_by_length, plan=plan):
        plan = plan_of(batch)
        if plan.n_examples == 0:
            current = (batch, torch.zeros(0, lm.num_layers + 1, lm.hidden_size), None)
        else:
            with torch.inference_mode():
                current = (batch, *to_host_async(pool_layers(out.hidden_states, plan)))  # [example, layer + 1, dim]
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
