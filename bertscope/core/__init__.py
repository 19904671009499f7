"""The model and one forward pass.

``models`` (``LoadedModel``, ``load_model``), ``forward`` (``inspect``, ``inspect_batch``, passes
whose outputs stay on the device, pooling there), ``inspection`` (the typed results), ``tokens``
(readable tokens in every tokenizer family), ``layers`` (the one numbering of layers),
``card`` (the facts shown about a model), ``random_models`` (full-size random models),
``hook_points`` (the named hook points of every family, bound to the model's modules by name),
``hooked_pass`` (the one owner of a pass: ``run``, ``run_with_cache``, ``turn``), ``block_modules``
(each block's weights, read from the hook points' modules), ``passes``
(batches bounded by bytes for passes that only need the output).
May import: ``errors``, ``runtime``, ``sources``.
"""
