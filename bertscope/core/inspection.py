"""What one forward pass returns: the typed results every analysis reads.

- ``Inspection``: one input (tokens, ids, word ids, attentions, hidden states, logits), CPU
  float32 numpy, each field with its shape;
- ``BatchInspection``: one padded batch; ``item(i)`` returns row i with the padding cut away;
- ``TokenRow``: one row as the tokenizer left it, for locating words without spelling tokens.

Hidden states are indexed 0 = the embedding output, l = the output of encoder block l - 1
(``core.layers`` names them); attentions are indexed by block (``[layer, head, query, key]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar, cast

import numpy as np

from bertscope.core.tokens import readable_tokens
from bertscope.errors import BertScopeError

_T = TypeVar("_T")

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
            return cast(np.ndarray, self.mlm_logits[position])
        if position not in self.logit_positions:
            raise BertScopeError(f"Logits were kept only at positions {list(self.logit_positions)}.")
        return cast(np.ndarray, self.mlm_logits[self.logit_positions.index(position)])

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def n_layers(self) -> int:
        if self.hidden_states is not None:
            return int(self.hidden_states.shape[0]) - 1
        if self.attentions is None:
            raise BertScopeError("This result was computed without attentions or hidden states.")
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
    _strings: dict[int, tuple[list[str], list[str]]] = field(default_factory=dict, repr=False)  # row -> (raw, readable)

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
        return cast(np.ndarray, self.attention_mask.sum(axis=1))

    def __len__(self) -> int:
        return len(self.texts)

    def item(self, i: int) -> Inspection:
        keep = np.flatnonzero(self.attention_mask[i])  # [token] real positions (any pad side)

        def cut(seq: list[_T]) -> list[_T]:
            return [seq[j] for j in keep]

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
