"""Where a model's files come from.

``presets`` (the names: the one place they are defined), ``bundled`` (the one registry of the
offline models: package, origin, card note, folder), ``minilm``, ``minilm_mlm``,
``multilingual_e5`` and ``charsmap`` (building those folders), ``delta`` (a LoRA delta merged onto
its base), ``hub`` (reachability, the default model), ``resolve`` (a typed name -> files),
``configs`` (a config without weights). May import: ``errors``, ``runtime``.
"""

from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "PRESETS": "sources.presets",
    "BUNDLED": "sources.presets",
    "BUNDLED_MODELS": "sources.bundled",
    "default_model": "sources.hub",
    "hub_reachable": "sources.hub",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.sources.bundled import BUNDLED_MODELS as BUNDLED_MODELS
    from bertscope.sources.hub import default_model as default_model
    from bertscope.sources.hub import hub_reachable as hub_reachable
    from bertscope.sources.presets import BUNDLED as BUNDLED
    from bertscope.sources.presets import PRESETS as PRESETS
