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

    errors       the one exception type
    runtime      devices, attention kernels, transformers helpers, caches on disk and in memory
    sources      where a model's files come from: presets, the bundled models, the hub, shipped configs
    corpora      text and labels without a model: Brown, probe suites, senses, parallel data
    core         the loaded model, one forward pass, its typed results, layer names
    outputs      what the pretraining output layers say: fill-mask, the masking rule, logit lens, NSP/SOP
                 (``heads`` is its old name; "heads" are attention heads)
    tasks        what a fine-tuned model decides: classification, tagging, answer spans (its task head)
    analysis     reading representations: head statistics, shift, alignment, probes, parameters
    attribution  a registry of attribution methods
    retrieval    embedding models explained: the model's own sentence embedding, similarity token pair by pair
    training     BERT's pretraining recipe
    interventions  change the model and watch the output: head ablation, head importance, patching
    circuits     which edges carry a decision: EAP, EAP-IG, faithfulness as MIB scores it
    figures      plotly and bertviz builders
    cli          every command
"""

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
