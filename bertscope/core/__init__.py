"""The model and one forward pass.

``models`` (``LoadedModel``, ``load_model``), ``forward`` (``inspect``, ``inspect_batch``, passes
whose outputs stay on the device), ``batch_plan`` (texts tokenised once, padded, batches planned by
bytes), ``pooling`` (hidden states pooled on the device, copied to the host asynchronously),
``word_pieces`` (pieces to words, every family), ``inspection`` (the typed results), ``tokens``
(readable tokens in every tokenizer family), ``layers`` (the one numbering of layers),
``card`` (the facts shown about a model), ``random_models`` (full-size random models),
``hook_points`` (the named hook points of every family, bound to the model's modules by name),
``hooked_pass`` (the one owner of a pass: ``run``, ``run_with_cache``, ``turn``), ``block_modules``
(each block's weights, read from the hook points' modules), ``passes``
(batches bounded by bytes for passes that only need the output).
May import: ``errors``, ``runtime``, ``sources``.
"""

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "LoadedModel": "core.models",
    "load_model": "core.models",
    "inspect": "core.forward",
    "inspect_batch": "core.forward",
    "Inspection": "core.inspection",
    "BatchInspection": "core.inspection",
    "run": "core.hooked_pass",
    "run_with_cache": "core.hooked_pass",
    "run_block": "core.hooked_pass",
    "turn": "core.hooked_pass",
    "ActivationCache": "core.hooked_pass",
    "hook_names": "core.hook_points",
    "hook_point": "core.hook_points",
    "every_layer": "core.hook_points",
    "every_state": "core.hook_points",
    "zero_head": "core.hook_points",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
