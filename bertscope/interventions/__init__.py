"""Test a claim by changing the model and watching the output: causal interventions.

On the named hook points (``core.hook_points``: each head's context ``attn.hook_z`` or a hidden
state ``embed`` / ``hook_resid_post``, edited on the loaded model's own modules, for the calling
thread only): ``ablation`` (zero or mean-ablate heads; the
prediction before and after), ``importance`` (Michel et al. 2019: head importance from gate
gradients, and the pruning curve against random orders), ``patching`` (clean states patched into a
corrupted run, per layer and position or per head: Vig et al. 2020; Meng et al. 2022; ``examples``:
patching examples checked on the default model); on a
fine-tuned classifier, ``task_importance`` (the task loss's head importance and pruning curve,
every label before and after ablation); ``concepts`` and ``amnesic`` (Elazar et al. 2021: erase a concept
at a layer with LEACE or INLP and watch the probe, the masked LM, the structural probe and a task model,
against a random erasure of the same rank). May import: ``errors``, ``runtime``, ``sources``,
``corpora``, ``core``, ``mlm``, ``analysis``, ``attribution`` (its targets), ``training``
(BERT's corruption), ``tasks`` (a classifier's decisions).
"""

from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "ablate_heads": "interventions.ablation",
    "mean_head_contexts": "interventions.ablation",
    "head_importance": "interventions.importance",
    "pruning_curve": "interventions.importance",
    "held_out_accuracy": "interventions.importance",
    "patch": "interventions.patching",
    "amnesic_probe": "interventions.amnesic",
    "AmnesicResult": "interventions.amnesic",
    "load_concept": "interventions.concepts",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.interventions.ablation import ablate_heads as ablate_heads
    from bertscope.interventions.ablation import mean_head_contexts as mean_head_contexts
    from bertscope.interventions.amnesic import AmnesicResult as AmnesicResult
    from bertscope.interventions.amnesic import amnesic_probe as amnesic_probe
    from bertscope.interventions.concepts import load_concept as load_concept
    from bertscope.interventions.importance import head_importance as head_importance
    from bertscope.interventions.importance import held_out_accuracy as held_out_accuracy
    from bertscope.interventions.importance import pruning_curve as pruning_curve
    from bertscope.interventions.patching import patch as patch
