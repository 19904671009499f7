"""The model and one forward pass.

``models`` (``LoadedModel``, ``load_model``), ``forward`` (``inspect``, ``inspect_batch``, passes
whose outputs stay on the device, pooling there), ``inspection`` (the typed results), ``tokens``
(readable tokens in every tokenizer family), ``layers`` (the one numbering of layers),
``card`` (the facts shown about a model), ``random_models`` (full-size random models),
``block_modules`` (each block's own modules: value, output projection, LayerNorm, the producer of
each hidden state), ``hooks`` (thread-owned edits of head contexts and hidden states), ``passes``
(batches bounded by bytes for passes that only need the output).
May import: ``errors``, ``runtime``, ``sources``.
"""
