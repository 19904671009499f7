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

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.core.forward import inspect as inspect
    from bertscope.core.forward import inspect_batch as inspect_batch
    from bertscope.core.hook_points import every_layer as every_layer
    from bertscope.core.hook_points import every_state as every_state
    from bertscope.core.hook_points import hook_names as hook_names
    from bertscope.core.hook_points import hook_point as hook_point
    from bertscope.core.hook_points import zero_head as zero_head
    from bertscope.core.hooked_pass import ActivationCache as ActivationCache
    from bertscope.core.hooked_pass import run as run
    from bertscope.core.hooked_pass import run_block as run_block
    from bertscope.core.hooked_pass import run_with_cache as run_with_cache
    from bertscope.core.hooked_pass import turn as turn
    from bertscope.core.inspection import BatchInspection as BatchInspection
    from bertscope.core.inspection import Inspection as Inspection
    from bertscope.core.models import LoadedModel as LoadedModel
    from bertscope.core.models import load_model as load_model
