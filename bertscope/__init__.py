"""BertScope: look inside BERT-family encoders.

    >>> from bertscope import load_model, inspect
    >>> r = inspect(load_model("bundled"), "The bank of the river.")
    >>> r.attentions.shape                         # [layer, head, query, key]

The library never imports streamlit; the app (``app.py``, ``views/``) and the command line
(``python -m bertscope``) are thin layers over it. Its floors, each a subpackage that imports only
from the floors below it:

    errors       the one exception type
    runtime      devices, attention kernels, transformers helpers, caches on disk and in memory
    sources      where a model's files come from: presets, the bundled models, the hub, shipped configs
    corpora      text and labels without a model: Brown, probe suites, senses, parallel data
    core         the loaded model, one forward pass, its typed results, layer names
    heads        what the pretraining heads say: fill-mask, the masking rule, logit lens, NSP/SOP
    analysis     reading representations: head statistics, shift, alignment, probes, parameters
    attribution  a registry of attribution methods
    training     BERT's pretraining recipe
    interventions  change the model and watch the output: head ablation, head importance, patching
    figures      plotly and bertviz builders
    cli          every command
"""

from bertscope.core.forward import inspect, inspect_batch
from bertscope.core.inspection import BatchInspection, Inspection
from bertscope.core.models import LoadedModel, load_model
from bertscope.errors import BertScopeError
from bertscope.sources.hub import default_model, hub_reachable
from bertscope.sources.presets import BUNDLED, PRESETS

__all__ = [
    "BUNDLED", "PRESETS", "BatchInspection", "BertScopeError", "Inspection", "LoadedModel",
    "default_model", "hub_reachable", "inspect", "inspect_batch", "load_model",
]
