"""TransformerLens 4 bridge adapters for the encoder families its bridge lacks, read from BertScope's records.

TransformerLens 4.3 bridges ``BertForMaskedLM`` and ``RobertaForMaskedLM``. This module gives its
``TransformerBridge`` the masked-LM checkpoints of ELECTRA, DistilBERT, XLM-R (and CamemBERT, data2vec-text)
and DeBERTa-v2/v3: each adapter's module paths come from the family's record (``runtime.families.Family``:
its blocks, q/k/v, W_O, feed-forward and LayerNorm paths; its masked-LM head), so a family is still written
once. They are registered through TransformerLens's entry point (``pyproject.toml``:
``[project.entry-points."transformer_lens.architectures"]``). TransformerLens 4.3 reads its entry points after
it has checked a checkpoint's architecture against its own list, so call
``ArchitectureAdapterFactory.discover_entry_points()`` (or import this module) once before
``TransformerBridge.boot_transformers("<folder>")``: importing lists the architectures where that check looks.
On DeBERTa the bridge has no ``attn.hook_q``/``hook_k`` (its query and key modules also project the relative
positions, and the bridge caches a module's last call); BertScope's hook points read the tokens' call.

Where the bridge cannot follow (stated, not papered over):

- **ALBERT**: one layer's weights called once per layer. The bridge binds each ``blocks.L`` to its own module
  in a ``ModuleList``; ALBERT's list has one entry (``albert_layer_groups.0.albert_layers.0``), so its hooks
  would fire 12 times under ``blocks.0``. Meeting it needs the encoder's loop rewritten (TransformerLens's
  internals or transformers'), which this module does not copy. BertScope's own hook points count the calls.
- **ModernBERT**: its encoder fuses q, k and v in one projection (``attn.Wqkv``) with rotary positions
  applied inside the attention; TransformerLens's joint-QKV bridge re-implements attention for decoders
  (causal, its own rotary wiring). Not offered; BertScope's hook points cover it.

Loaded by TransformerLens only (this module imports it); nothing in BertScope imports this module.
"""

from __future__ import annotations

import itertools
from typing import Any

from transformer_lens.factories import architecture_adapter_factory as _factory
from transformer_lens.model_bridge.architecture_adapter import ArchitectureAdapter
from transformer_lens.model_bridge.generalized_components import (
    AttentionBridge,
    BlockBridge,
    EmbeddingBridge,
    LinearBridge,
    MLPBridge,
    NormalizationBridge,
    PosEmbedBridge,
    UnembeddingBridge,
)
from transformer_lens.model_bridge.supported_architectures.bert import BertArchitectureAdapter
from transformer_lens.utilities import architectures as _architectures

from bertscope.runtime.families import Family, family_of

# architecture (config.architectures[0]) -> (model_type whose record it reads, the base model's attribute)
ARCHITECTURES: dict[str, tuple[str, str]] = {
    "ElectraForMaskedLM": ("electra", "electra"),
    "DistilBertForMaskedLM": ("distilbert", "distilbert"),
    "XLMRobertaForMaskedLM": ("xlm-roberta", "roberta"),
    "CamembertForMaskedLM": ("camembert", "roberta"),
    "Data2VecTextForMaskedLM": ("data2vec-text", "data2vec_text"),
    "DebertaV2ForMaskedLM": ("deberta-v2", "deberta"),
}
# TransformerLens picks the Hugging Face class to load from this set (else a causal LM): ours are masked LMs
_architectures.MASKED_LM_ARCHITECTURES.update(ARCHITECTURES)


def _attention_root(family: Family) -> str:
    """The module holding q, k, v and W_O (BERT: ``attention``), as TransformerLens's AttentionBridge wraps."""
    pairs = zip(family.query.split("."), family.out_proj.split("."))
    return ".".join(a for a, _ in itertools.takewhile(lambda pair: pair[0] == pair[1], pairs))


def _inside(path: str, root: str) -> str:
    return path[len(root) + 1:] if root else path


def block_bridge(family: Family, cfg: Any) -> Any:
    """``blocks`` for a post-LayerNorm family: ln1 after attention, ln2 after the feed-forward, as BERT's."""
    root = _attention_root(family)
    return BlockBridge(
        name=None,  # set by the adapter: the base model's attribute + the record's ``blocks``
        hook_alias_overrides={"hook_mlp_out": "mlp.out.hook_out", "hook_mlp_in": "mlp.in.hook_in"},
        submodules={
            "ln1": NormalizationBridge(name=family.attn_norm, config=cfg, use_native_layernorm_autograd=True),
            "ln2": NormalizationBridge(name=family.mlp_norm, config=cfg, use_native_layernorm_autograd=True),
            "attn": AttentionBridge(name=root, config=cfg, submodules={
                # DeBERTa's query and key modules project the relative positions too, after the tokens: the
                # bridge caches a module's last call, so they would read the positions' projection. Left out.
                **({} if family.scores == "relative" else {
                    "q": LinearBridge(name=_inside(family.query, root)),
                    "k": LinearBridge(name=_inside(family.key, root))}),
                "v": LinearBridge(name=_inside(family.value, root)),
                "o": LinearBridge(name=_inside(family.out_proj, root))}),
            "mlp": MLPBridge(name=None, config=cfg, submodules={
                "in": LinearBridge(name=family.mlp_in), "out": LinearBridge(name=family.mlp_out)}),
        })


class FamilyAdapter(BertArchitectureAdapter):
    """BERT's adapter with every path read from a family record; the masked-LM head's pieces found on the
    loaded model (its one vocabulary projection, its LayerNorm, its dense layer)."""

    architecture = ""

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        model_type, base = ARCHITECTURES[self.architecture]
        self.family = family_of(model_type)
        if self.family.layernorm != "post" or self.family.shared_layers or self.family.qkv:
            raise ValueError(f"{self.family.name} has no TransformerLens bridge adapter (see bertscope.interop.tl_adapters).")
        self.base = base
        blocks = block_bridge(self.family, self.cfg)
        blocks.name = f"{base}.{self.family.blocks}"
        embeddings = f"{base}.embeddings"
        self.component_mapping = {
            "embed": EmbeddingBridge(name=f"{embeddings}.word_embeddings"),
            "token_type_embed": EmbeddingBridge(name=f"{embeddings}.token_type_embeddings"),
            "pos_embed": PosEmbedBridge(name=f"{embeddings}.position_embeddings"),
            "embed_ln": NormalizationBridge(name=f"{embeddings}.LayerNorm", config=self.cfg,
                                            use_native_layernorm_autograd=True),
            "blocks": blocks,
        }

    def prepare_model(self, hf_model: Any) -> None:
        import torch

        modules = dict(hf_model.named_modules())
        for key in ("token_type_embed", "pos_embed"):  # DistilBERT has no token types; DeBERTa-v3 no positions
            if self.components[key].name not in modules:
                del self.components[key]
        vocab = hf_model.get_output_embeddings()
        for head in self.family.mlm_head:  # the record's masked-LM head, in the order it is applied
            for name, module in modules[head].named_modules(prefix=head):
                if module is vocab:
                    self.components["unembed"] = UnembeddingBridge(name=name)
                elif isinstance(module, torch.nn.LayerNorm):
                    self.components["ln_final"] = NormalizationBridge(name=name, config=self.cfg,
                                                                      use_native_layernorm_autograd=True)
                elif isinstance(module, torch.nn.Linear) and "mlm_head" not in self.components:
                    self.components["mlm_head"] = LinearBridge(name=name)
        if getattr(hf_model.config, "conv_kernel_size", 0):  # as BertScope's own hook points refuse it
            raise ValueError("DeBERTa-v2 with a convolution after layer 0 has no TransformerLens bridge adapter.")
        ArchitectureAdapter.prepare_model(self, hf_model)  # the base's eager attention (not BERT's NSP fix-ups)


def _adapter(architecture: str) -> type:
    return type(f"{architecture}Adapter", (FamilyAdapter,), {"architecture": architecture,
                                                             "__doc__": f"{architecture} from its family record."})


# one class per architecture, each an entry point's target (pyproject.toml)
ElectraForMaskedLMAdapter = _adapter("ElectraForMaskedLM")
DistilBertForMaskedLMAdapter = _adapter("DistilBertForMaskedLM")
XLMRobertaForMaskedLMAdapter = _adapter("XLMRobertaForMaskedLM")
CamembertForMaskedLMAdapter = _adapter("CamembertForMaskedLM")
Data2VecTextForMaskedLMAdapter = _adapter("Data2VecTextForMaskedLM")
DebertaV2ForMaskedLMAdapter = _adapter("DebertaV2ForMaskedLM")

# TransformerLens 4.3 checks a checkpoint's architecture against SUPPORTED_ARCHITECTURES
# (``_hf_format.determine_architecture_from_hf_config``), not the registry its entry points fill: listed there
# too, or ``boot_transformers`` refuses the checkpoint before it asks for the adapter
for _name in ARCHITECTURES:
    _factory.SUPPORTED_ARCHITECTURES.setdefault(_name, globals()[f"{_name}Adapter"])
