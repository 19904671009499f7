"""Every encoder family BertScope knows, one record each: what the rest of the library reads about
a family, and nothing anywhere else.

From a ``Family`` derive: the named hook points and the block weights (``core.hook_points``,
``core.block_modules``), which heads a checkpoint may carry (``core.models``), the most tokens a
model takes (``runtime.hf``), the weights LoRA wraps in both of BERT's stages (``training``), the
parameter breakdown (``analysis.params``), which measures apply (norm-based attention and ALTI read
post-LayerNorm blocks whose scores are q·k alone; the query/key view likewise) and the shipped
config of a real size (``bertscope/configs/``) that random models and the Parameters page read.

Adding a family is one record in ``FAMILIES`` and its config file; ``tests/core/test_families.py``
then runs it, at tiny random size, through loading, every hook point against the Hugging Face
tensors, a pretraining step (LoRA and full), a fine-tuning step and a prediction.

    >>> from bertscope.runtime.families import family_of
    >>> family_of("modernbert").layernorm, family_of("modernbert").lora_targets
    ('pre', ('Wqkv', 'Wo', 'Wi'))
    >>> family_of("roberta").position_offset, family_of("bert").pair_head
    (2, 'nsp')
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

from bertscope.errors import BertScopeError


@dataclass(frozen=True)
class Family:
    """One family's facts. Module paths are dotted paths inside a block ("" is the block itself),
    except ``blocks``, ``embed`` and ``final_norm``, which are paths inside the base model."""

    name: str  # as the docs and pages write it
    model_types: tuple[str, ...]  # transformers' ``model_type`` values it covers
    config: str  # the preset whose shipped config (bertscope/configs/) is a real size of it
    blocks: str  # the ModuleList of blocks ("" for ALBERT: ``shared_layers``)
    embed: tuple[str, ...]  # the first of these that exists produces hidden state 0 ("embeddings")
    attention: str  # returns (context or output, weights): ``attn.hook_pattern``
    out_proj: str  # W_O: its input is the heads' contexts side by side (``attn.hook_z``)
    attn_norm: str  # post-LayerNorm: over attention output + residual; pre-LayerNorm: before attention
    mlp_in: str  # ``mlp.hook_pre`` (with ``gated_mlp``: [activation input, gate] side by side)
    mlp_out: str  # ``hook_mlp_out``; its input is ``mlp.hook_post``
    mlp_norm: str  # post: over feed-forward output + residual; pre: before the feed-forward
    lora_targets: tuple[str, ...]  # peft ``target_modules``: every attention and feed-forward projection
    mlm_head: tuple[str, ...]  # modules of the masked-LM class applied in turn to the encoder's output
    query: str = ""  # separate projections, or "" where ``qkv`` holds all three
    key: str = ""
    value: str = ""
    qkv: str = ""  # one fused projection: [query | key | value] side by side
    layernorm: Literal["post", "pre"] = "post"  # BERT's order, or LayerNorm before each sub-block
    final_norm: str = ""  # pre-LayerNorm: the norm after the last block; its output is the last hidden state
    gated_mlp: bool = False  # GeGLU: act(first half) * second half
    scores: Literal["absolute", "relative", "rotary"] = "absolute"  # is q·k alone the attention score?
    pair_head: Literal["nsp", "sop"] | None = None  # the sentence-pair layer its pretraining had
    position_offset: int = 0  # positions never usable (RoBERTa's ids start after padding_idx)
    shared_layers: bool = False  # ALBERT: one layer's weights, called once per layer
    layer_params: str = ""  # regex on a parameter name in the base model: group 1 is the block's index
    weights_on_request: bool = False  # attention returns its weights only when the pass asks output_attentions

    @property
    def post_layernorm(self) -> bool:
        return self.layernorm == "post"

    @property
    def layer_pattern(self) -> str:
        return self.layer_params or rf"^{self.blocks.replace('.', chr(92) + '.')}\.(\d+)\."

    def covers(self, model_type: str) -> bool:
        return model_type in self.model_types


BERT = Family(
    "BERT", ("bert", "ernie"), "bert-base-uncased", blocks="encoder.layer", embed=("embeddings",),
    query="attention.self.query", key="attention.self.key", value="attention.self.value",
    attention="attention.self", out_proj="attention.output.dense", attn_norm="attention.output.LayerNorm",
    mlp_in="intermediate.dense", mlp_out="output.dense", mlp_norm="output.LayerNorm",
    # peft matches a target against the end of each module's name: "output.dense" is both W_O and FFN out
    lora_targets=("query", "key", "value", "output.dense", "intermediate.dense"), mlm_head=("cls.predictions",),
    pair_head="nsp")
FAMILIES: tuple[Family, ...] = (
    BERT,
    replace(BERT, name="RoBERTa", model_types=("roberta", "xlm-roberta", "camembert", "data2vec-text"),
            config="roberta-base", pair_head=None, position_offset=2, mlm_head=("lm_head",)),
    # ELECTRA's generator projects its narrower embeddings up to the hidden size
    replace(BERT, name="ELECTRA", model_types=("electra",), config="google/electra-base-discriminator",
            embed=("embeddings_project", "embeddings"), pair_head=None,
            mlm_head=("generator_predictions", "generator_lm_head")),
    Family(
        "ALBERT", ("albert",), "albert-base-v2", blocks="", embed=("encoder.embedding_hidden_mapping_in",),
        query="attention.query", key="attention.key", value="attention.value", attention="attention",
        out_proj="attention.dense", attn_norm="attention.LayerNorm", mlp_in="ffn", mlp_out="ffn_output",
        mlp_norm="full_layer_layer_norm",
        lora_targets=("query", "key", "value", "attention.dense", "ffn", "ffn_output"), mlm_head=("predictions",),
        pair_head="sop",
        shared_layers=True, layer_params=r"^encoder\.albert_layer_groups\.(\d+)\.albert_layers\.\d+\."),
    Family(
        "DistilBERT", ("distilbert",), "distilbert-base-uncased", blocks="transformer.layer", embed=("embeddings",),
        query="attention.q_lin", key="attention.k_lin", value="attention.v_lin", attention="attention",
        out_proj="attention.out_lin", attn_norm="sa_layer_norm", mlp_in="ffn.lin1", mlp_out="ffn.lin2",
        mlp_norm="output_layer_norm", lora_targets=("q_lin", "k_lin", "v_lin", "out_lin", "lin1", "lin2"),
        mlm_head=("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector")),
    Family(
        "DeBERTa-v2/v3", ("deberta-v2",), "microsoft/deberta-v3-base", blocks="encoder.layer", embed=("embeddings",),
        query="attention.self.query_proj", key="attention.self.key_proj", value="attention.self.value_proj",
        attention="attention.self", out_proj="attention.output.dense", attn_norm="attention.output.LayerNorm",
        mlp_in="intermediate.dense", mlp_out="output.dense", mlp_norm="output.LayerNorm",
        lora_targets=("query_proj", "key_proj", "value_proj", "output.dense", "intermediate.dense"),
        mlm_head=("cls.predictions",), scores="relative", weights_on_request=True),  # transformers' legacy head (the default)
    # Warner et al. 2024: rotary positions, GeGLU, pre-LayerNorm (none before layer 0's attention),
    # global attention every third layer and a sliding window in between, no token types
    Family(
        "ModernBERT", ("modernbert",), "answerdotai/ModernBERT-base", blocks="layers", embed=("embeddings",),
        qkv="attn.Wqkv", attention="attn", out_proj="attn.Wo", attn_norm="attn_norm", mlp_in="mlp.Wi",
        mlp_out="mlp.Wo", mlp_norm="mlp_norm", lora_targets=("Wqkv", "Wo", "Wi"), mlm_head=("head", "decoder"),
        layernorm="pre",
        final_norm="final_norm", gated_mlp=True, scores="rotary"),
)
# Types that load and show attention weights and hidden states, but have no record: no hook points,
# no LoRA, no measures that read a block's weights. Each with the sentence-pair layer it may carry.
class Unrecorded(NamedTuple):
    """What BertScope knows of an encoder type without a family record: enough to count and load it."""

    pair_head: Literal["nsp", "sop"] | None = None  # its pretraining class's sentence-pair layer
    position_offset: int = 0  # RoBERTa's: position ids start past the padding index


WITHOUT_RECORD: dict[str, Unrecorded] = {
    "big_bird": Unrecorded(), "convbert": Unrecorded(), "deberta": Unrecorded(), "ibert": Unrecorded(),
    "megatron-bert": Unrecorded("nsp"), "mobilebert": Unrecorded("nsp"), "mpnet": Unrecorded(),
    "rembert": Unrecorded(), "roberta-prelayernorm": Unrecorded(position_offset=2), "roc_bert": Unrecorded(),
    "roformer": Unrecorded(), "squeezebert": Unrecorded(), "xlm-roberta-xl": Unrecorded(position_offset=2),
    "xmod": Unrecorded(position_offset=2),
}
_BY_TYPE = {t: f for f in FAMILIES for t in f.model_types}


def family_of(model_type: str) -> Family:
    """The record covering ``model_type``, or one line naming the families that have one."""
    found = _BY_TYPE.get(model_type)
    if found is None:
        raise BertScopeError(f"{model_type} has no family record (hook points, LoRA, block weights): BertScope "
                             f"covers {', '.join(f.name for f in FAMILIES)}.")
    return found


def has_record(model_type: str) -> bool:
    return model_type in _BY_TYPE


def encoder_types() -> frozenset[str]:
    """Every ``model_type`` BertScope loads: the families' and those without a record."""
    return frozenset(_BY_TYPE) | frozenset(WITHOUT_RECORD)


def pair_head(model_type: str) -> str | None:
    """The sentence-pair layer ("nsp" or "sop") a ``model_type``'s pretraining class carries, if any."""
    found = _BY_TYPE.get(model_type)
    return found.pair_head if found is not None else WITHOUT_RECORD.get(model_type, Unrecorded()).pair_head


def position_offset(model_type: str) -> int:
    found = _BY_TYPE.get(model_type)
    if found is not None:
        return found.position_offset
    return WITHOUT_RECORD.get(model_type, Unrecorded()).position_offset


def sliding_window(config: object, layer: int) -> int | None:
    """Tokens on each side a layer's attention reaches, where a sliding window bounds it (ModernBERT's
    local layers: ``local_attention // 2``); None for global attention."""
    types = getattr(config, "layer_types", None)
    if not types or layer >= len(types) or types[layer] != "sliding_attention":
        return None
    return int(getattr(config, "sliding_window"))  # noqa: B009 (config: object, so mypy refuses config.sliding_window)
