"""BertScope: look inside BERT-family encoders.

The library never imports streamlit; the app in ``app.py``/``views/`` and the CLI
(``python -m bertscope``) are thin layers over it.
"""

from .errors import BertScopeError
from .hub import default_model, hub_reachable
from .inspect import BatchInspection, Inspection, inspect, inspect_batch
from .models import LoadedModel, load_model
from .presets import BUNDLED, PRESETS

__all__ = [
    "BUNDLED", "PRESETS", "BatchInspection", "BertScopeError", "Inspection", "LoadedModel",
    "default_model", "hub_reachable", "inspect", "inspect_batch", "load_model",
]
