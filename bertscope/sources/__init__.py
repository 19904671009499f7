"""Where a model's files come from.

``presets`` (the names: the one place they are defined), ``bundled`` (the one registry of the
offline models: package, origin, card note, folder), ``minilm``, ``minilm_mlm``,
``multilingual_e5`` and ``charsmap`` (building those folders), ``delta`` (a LoRA delta merged onto
its base), ``hub`` (reachability, the default model), ``resolve`` (a typed name -> files),
``configs`` (a config without weights). May import: ``errors``, ``runtime``.
"""
