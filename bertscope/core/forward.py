"""One forward pass -> one typed result.

    >>> from bertscope import load_model, inspect
    >>> lm = load_model("bundled")
    >>> r = inspect(lm, "The bank of the river.")
    >>> r.tokens[:3], r.attentions.shape          # [layer, head, query, key]
    (['[CLS]', 'the', 'bank'], (6, 12, 8, 8))

Everything handed out is CPU float32 numpy, so analysis code never touches torch or the
device (``device_batches`` keeps a pass's outputs on the device for reductions there;
``core.batch_plan`` plans the batches, ``core.pooling`` pools hidden states where they are). ``inspect_batch`` runs many sentences with padding; each ``BatchInspection`` keeps
the attention mask, and ``BatchInspection.item(i)`` returns sentence ``i`` with the padding
cut away, so no statistic built on it can count a pad token.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, Literal, cast

import numpy as np
import torch

from bertscope.core.batch_plan import DEFAULT_BATCH_BYTES, Padded, Tokenized, output_bytes, pad, plan_rows, tokenize
from bertscope.core.hooked_pass import check_text, model_inputs
from bertscope.core.inspection import BatchInspection, Inspection
from bertscope.core.models import LoadedModel
from bertscope.core.tokens import readable_tokens
from bertscope.errors import BertScopeError

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
        return cast(torch.Tensor, input_ids == lm.tokenizer.mask_token_id)
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
    feed = model_inputs(lm, enc)
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
        if not (with_logits and "mlm" in lm.outputs):
            logits = None  # not asked for, or not the masked-LM head's
        if logits is not None and logit_rows is not None:
            logits = logits[logit_rows.to(logits.device)]  # [rows kept, vocab], item by item
        nsp = getattr(out, "seq_relationship_logits", None)
        sop = getattr(out, "sop_logits", None)
        return {
            "attentions": None if out.attentions is None else
            _numpy(torch.stack(out.attentions, dim=1), PRECISIONS[precision]),  # [batch, layer, head, q, k]
            "hidden_states": None if out.hidden_states is None else
            _numpy(torch.stack(out.hidden_states, dim=1)),  # [batch, layer + 1, token, dim]
            "mlm_logits": None if logits is None else _numpy(logits),
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


def _describe(lm: LoadedModel, padded: Padded, texts: list[str], pairs: list[str | None], indices: list[int],
              arrays: dict[str, Any] | None = None, rows: torch.Tensor | None = None) -> BatchInspection:
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
    if padded is None:
        if tokenized is None:
            tokenized = tokenize(lm, texts, pairs)
        padded = pad(lm, tokenized, range(len(texts)))
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

    Args:
        lm: the model (``load_model``).
        text: segment A.
        text_pair: segment B, for a sentence pair.
        with_logits: keep the head's logits (a masked LM's, at ``logit_positions``).
        with_attentions: keep every layer's attention weights.
        with_hidden_states: keep every hidden state (the embeddings, then each layer's output).
        logit_positions: "masks", token positions, or None for every position.
        precision: "float32", or "float16" for the attentions.

    Returns:
        An ``Inspection``: tokens, attentions [layer, head, query, key], hidden states [state, token, dim],
        logits, warnings.
    """
    check_text(text)
    if text_pair is not None:
        check_text(text_pair, "second text")
    return _forward_batch(lm, [text], [text_pair], with_logits, [0], with_attentions, with_hidden_states,
                          logit_positions, precision).item(0)


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

    Args:
        lm: the model.
        texts: segment A of each input.
        text_pairs: segment B of each (or None).
        batch_size: rows a batch at most.
        sort_by_length: batch texts of similar length together.
        with_logits: keep the head's logits.
        with_attentions: keep the attention weights.
        with_hidden_states: keep the hidden states.
        max_batch_bytes: about how many bytes of outputs one batch may hold.

    Returns:
        An iterator of ``BatchInspection``, one a batch, each with the ``indices`` of its rows in ``texts``.
    """
    row = lambda n: output_bytes(lm, n, with_attentions, with_hidden_states, with_logits)  # noqa: E731
    texts, pairs, tokenized, batches = plan_rows(lm, texts, text_pairs, batch_size, sort_by_length, max_batch_bytes,
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
    texts, pairs, tokenized, batches = plan_rows(lm, texts, text_pairs, batch_size, sort_by_length, max_batch_bytes,
                                             row, plan)
    for idx in batches:
        padded = pad(lm, tokenized, idx)
        out = device_pass(lm, padded.feed, with_attentions, with_hidden_states, with_logits=False)
        yield _describe(lm, padded, [texts[i] for i in idx], [pairs[i] for i in idx], idx), out


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
    arrays: dict[str, Any] = {k: (None if v is None or (k == "mlm_logits" and rows is not None) else v[0])
                              for k, v in out.items()}  # Any: each goes to its own field of the Inspection
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
