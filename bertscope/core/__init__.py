"""The model and one forward pass.

``models`` (``LoadedModel``, ``load_model``), ``forward`` (``inspect``, ``inspect_batch``, passes
whose outputs stay on the device, pooling there), ``inspection`` (the typed results), ``tokens``
(readable tokens in every tokenizer family), ``layers`` (the one numbering of layers),
``card`` (the facts shown about a model), ``random_models`` (full-size random models).
May import: ``errors``, ``runtime``, ``sources``.
"""
