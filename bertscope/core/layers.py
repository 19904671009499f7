"""One numbering of layers, on every page, command, JSON and title.

- A layer number names an encoder block, counted from 0 to L - 1, as ``attention`` and bertviz
  number them (heads likewise: TransformerLens's L8H10 is layer 8, head 10).
- The embedding output, the hidden state before block 0, is named ``"embeddings"``, never numbered.
- So the hidden states are named ``embeddings, 0, 1, …, L - 1``: the state after block l is
  "layer l". Arrays that hold them keep ``[0]`` for the embeddings (``hidden_states[l + 1]`` is
  layer l's output), as Hugging Face returns them; these functions translate at the edges.

    >>> hidden_names(3)
    ['embeddings', '0', '1', '2']
    >>> hidden_index("embeddings", 3), hidden_index(2, 3)
    (0, 3)
"""

from __future__ import annotations

from collections.abc import Sequence

from bertscope.errors import BertScopeError

EMBEDDINGS = "embeddings"
_EMBEDDING_SPELLINGS = {"embeddings", "embedding", "emb", "e"}

Layer = int | str  # a block number, or "embeddings"


def hidden_label(index: int) -> Layer:
    """The name of hidden state ``index`` (0 = the embedding output): ``"embeddings"`` or a block number."""
    return EMBEDDINGS if index == 0 else index - 1


def hidden_name(index: int) -> str:
    return str(hidden_label(index))


def hidden_names(n_layers: int) -> list[str]:
    """``["embeddings", "0", …, "L-1"]`` for a model of ``n_layers`` blocks."""
    return [hidden_name(i) for i in range(n_layers + 1)]


def hidden_labels(n_layers: int) -> list[Layer]:
    """``["embeddings", 0, …, L - 1]``: what JSON carries beside an array of hidden states."""
    return [hidden_label(i) for i in range(n_layers + 1)]


def layer_title(index: int) -> str:
    """For titles and captions: ``"the embeddings"`` or ``"layer 3"``."""
    return "the embeddings" if index == 0 else f"layer {index - 1}"


def parse_layer(value: Layer | None, n_layers: int, allow_embeddings: bool = True) -> Layer:
    """A layer as a user gives it (a block number, or "embeddings"), checked against the model."""
    text = str(value).strip().lower() if value is not None else ""
    if allow_embeddings and text in _EMBEDDING_SPELLINGS:
        return EMBEDDINGS
    try:
        block = int(text)
    except ValueError:
        block = None
    if block is None or not 0 <= block < n_layers:
        also = " or 'embeddings' (the embedding output)" if allow_embeddings else ""
        raise BertScopeError(f"Layer {value!r} does not exist: layers are numbered 0 to {n_layers - 1}{also}.")
    return block


def hidden_index(value: Layer | None, n_layers: int) -> int:
    """Index into ``[embeddings, block 0, …]`` hidden states for a layer a user names."""
    layer = parse_layer(value, n_layers)
    return 0 if layer == EMBEDDINGS else int(layer) + 1


def parse_blocks(text: str | None, n_layers: int) -> tuple[int, ...] | None:
    """A comma-separated list of block numbers ("0,5"), sorted and checked; None for none given."""
    if text is None or not str(text).strip():
        return None
    blocks = []
    for part in str(text).split(","):
        if part.strip():
            blocks.append(int(parse_layer(part, n_layers, allow_embeddings=False)))
    if not blocks:
        raise BertScopeError(f"Give layer numbers from 0 to {n_layers - 1}, e.g. 0 or 0,{n_layers - 1}.")
    return tuple(sorted(set(blocks)))


def names_of(indices: Sequence[int]) -> list[str]:
    return [hidden_name(i) for i in indices]
