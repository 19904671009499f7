"""Other tools' doors into BertScope's families (an optional floor: nothing here is imported by the rest).

``tl_adapters``: TransformerLens 4's ``TransformerBridge`` adapters for the families its bridge lacks,
derived from the family records (``runtime.families``) and registered through its entry point
``transformer_lens.architectures`` (``pyproject.toml``), so ``TransformerBridge.boot_transformers`` opens an
ELECTRA, DistilBERT, XLM-R or DeBERTa-v2/v3 checkpoint once BertScope is installed beside it. The hook names
each side gives the same Hugging Face tensor, and those that differ by definition, are ``hook_names``.
May import: ``errors``, ``runtime``.
"""
