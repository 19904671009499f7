"""BertScope: look inside BERT-family encoders.

    >>> from bertscope import load_model, inspect
    >>> lm = load_model("bundled")
    >>> r = inspect(lm, "The bank of the river.")
    >>> r.attentions.shape                         # [layer, head, query, key]
    (6, 12, 8, 8)
    >>> out, cache = lm.run_with_cache("The bank of the river.", names=["blocks.3.hook_resid_post"])
    >>> tuple(cache["blocks.3.hook_resid_post"].shape)   # [batch, pos, d_model]
    (1, 8, 384)

Every name in ``__all__`` is importable from here (``from bertscope import attribute, patch,
probe_layers, train``); each subpackage's ``__init__`` exports its own verbs the same way.

The library never imports streamlit but in its top floor, the app (``app``: ``bertscope app``, ``streamlit run app.py``), and the command line
(``python -m bertscope``) are thin layers over it. Its floors, each a subpackage that imports only
from the floors below it:

    errors       the one exception type (and NotInstalled: data fetched from a registry, not yet here)
    runtime      devices, attention kernels, transformers helpers, caches on disk and in memory, atomic writes,
                 the disk quota
    sources      where a model's files come from: presets, the bundled models, the hub, shipped configs
    corpora      text and labels without a model: Brown, probe suites, senses, parallel data, readers of files
    interop      other libraries' names for the hook points (TransformerLens)
    core         the loaded model, one forward pass, its typed results, layer names, hook points
    mlm          what the pretraining output layers say: fill-mask, the masking rule, logit lens, NSP/SOP
    tasks        what a fine-tuned model decides: classification, tagging, answer spans (its task head)
    analysis     reading representations: head statistics, shift, alignment, probes, parameters
    attribution  a registry of attribution methods
    retrieval    embedding models explained: the model's own sentence embedding, similarity token pair by pair,
                 search over a corpus
    lenses       each layer read as the output: the tuned lens beside the logit lens
    causal       whether a concept is used: concept activation vectors and their test (TCAV)
    training     BERT's pretraining and fine-tuning recipes
    interventions  change the model and watch the output: head ablation, head importance, patching, erasure
    features     dictionary features: SAEs, crosscoders, the feature browser, switching features off
    circuits     which edges carry a decision: EAP, EAP-IG, faithfulness as MIB scores it
    graphs       attribution graphs: one decision as transcoder features, error nodes and embeddings
    engines      where corpus-scale passes run beyond one process (Ray)
    figures      plotly and bertviz builders
    cli          every command
    app          the Streamlit pages (the one floor that imports streamlit)
"""

from typing import TYPE_CHECKING

from bertscope.errors import BertScopeError
from bertscope.runtime.exports import lazy_exports

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it)

# the verbs a notebook needs, each imported from its floor when first used (``import bertscope`` loads no torch)
_EXPORTS = {
    "inspect": "core.forward", "inspect_batch": "core.forward", "Inspection": "core.inspection",
    "BatchInspection": "core.inspection", "LoadedModel": "core.models", "load_model": "core.models",
    "default_model": "sources.hub", "hub_reachable": "sources.hub", "BUNDLED": "sources.presets",
    "PRESETS": "sources.presets",
    "run": "core.hooked_pass", "run_with_cache": "core.hooked_pass", "ActivationCache": "core.hooked_pass",
    "zero_head": "core.hook_points", "every_layer": "core.hook_points",
    "fill_mask": "mlm.fill_mask", "head_stats": "analysis.attention_stats",
    "hidden_states": "analysis.hidden_cache", "HiddenStateCache": "analysis.hidden_cache",
    "probe_layers": "analysis.probing", "shipped_task": "corpora.suites", "read_task": "corpora.probe_tasks",
    "compare_layers": "analysis.compare", "compare_heads": "analysis.compare",
    "attribute": "attribution.methods", "Target": "attribution.gradients", "METHODS": "attribution.registry",
    "faithfulness": "attribution.faithfulness",
    "ablate_heads": "interventions.ablation", "head_importance": "interventions.importance",
    "pruning_curve": "interventions.importance", "patch": "interventions.patching",
    "train": "training.recipe", "RecipeConfig": "training.config",
    "finetune": "training.fine_tuning", "FinetuneConfig": "training.config", "load_task_data": "training.task_data",
    "predict": "tasks.predict", "classify": "tasks.classify", "tag": "tasks.tag",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = ["BertScopeError", "__version__", *_EXPORTS]

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.analysis.attention_stats import head_stats as head_stats
    from bertscope.analysis.compare import compare_heads as compare_heads
    from bertscope.analysis.compare import compare_layers as compare_layers
    from bertscope.analysis.hidden_cache import HiddenStateCache as HiddenStateCache
    from bertscope.analysis.hidden_cache import hidden_states as hidden_states
    from bertscope.analysis.probing import probe_layers as probe_layers
    from bertscope.attribution.faithfulness import faithfulness as faithfulness
    from bertscope.attribution.gradients import Target as Target
    from bertscope.attribution.methods import attribute as attribute
    from bertscope.attribution.registry import METHODS as METHODS
    from bertscope.core.forward import inspect as inspect
    from bertscope.core.forward import inspect_batch as inspect_batch
    from bertscope.core.hook_points import every_layer as every_layer
    from bertscope.core.hook_points import zero_head as zero_head
    from bertscope.core.hooked_pass import ActivationCache as ActivationCache
    from bertscope.core.hooked_pass import run as run
    from bertscope.core.hooked_pass import run_with_cache as run_with_cache
    from bertscope.core.inspection import BatchInspection as BatchInspection
    from bertscope.core.inspection import Inspection as Inspection
    from bertscope.core.models import LoadedModel as LoadedModel
    from bertscope.core.models import load_model as load_model
    from bertscope.corpora.probe_tasks import read_task as read_task
    from bertscope.corpora.suites import shipped_task as shipped_task
    from bertscope.interventions.ablation import ablate_heads as ablate_heads
    from bertscope.interventions.importance import head_importance as head_importance
    from bertscope.interventions.importance import pruning_curve as pruning_curve
    from bertscope.interventions.patching import patch as patch
    from bertscope.mlm.fill_mask import fill_mask as fill_mask
    from bertscope.sources.hub import default_model as default_model
    from bertscope.sources.hub import hub_reachable as hub_reachable
    from bertscope.sources.presets import BUNDLED as BUNDLED
    from bertscope.sources.presets import PRESETS as PRESETS
    from bertscope.tasks.classify import classify as classify
    from bertscope.tasks.predict import predict as predict
    from bertscope.tasks.tag import tag as tag
    from bertscope.training.config import FinetuneConfig as FinetuneConfig
    from bertscope.training.config import RecipeConfig as RecipeConfig
    from bertscope.training.fine_tuning import finetune as finetune
    from bertscope.training.recipe import train as train
    from bertscope.training.task_data import load_task_data as load_task_data
