"""BERT's two stages on any BERT-family encoder: masked-LM pretraining, continued, and fine-tuning
under a task head.

``loop`` (the one training loop of both stages: ``run_epochs`` over an ``Objective``); the first
stage: ``recipe`` (``train`` and its ``MaskedLM`` objective), ``config``, ``instances`` (chunks,
NSP/SOP pairs), ``batches`` (the 80/10/10 corruption, by ``mlm.masking``'s rule), ``model``
(the output layers, LoRA), ``steps`` (forward, backward, scoring within a byte budget); the second stage:
``fine_tuning`` (``finetune``), ``task_data`` (the tweets, the BBC topics, EWT, Brown, SQuAD, a user's
file), ``task_objective`` (labels on first pieces, the loss, held-out figures), ``span_objective``
(answer spans: windows labelled start/end, scored by ``span_scores``, SQuAD's exact match and F1),
``task_model`` (the head, LoRA); both: ``checkpoint``, ``export``, ``job`` (the app's background
run), ``processes`` and ``launch`` (data-parallel runs through Accelerate). May import: ``errors``,
``runtime``, ``sources``, ``corpora``, ``core``, ``mlm``, ``tasks`` (a question's windows and
its answers are decoded as the Predictions page decodes them).
"""

from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "train": "training.recipe",
    "RecipeConfig": "training.config",
    "finetune": "training.fine_tuning",
    "FinetuneConfig": "training.config",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.training.config import FinetuneConfig as FinetuneConfig
    from bertscope.training.config import RecipeConfig as RecipeConfig
    from bertscope.training.fine_tuning import finetune as finetune
    from bertscope.training.recipe import train as train
