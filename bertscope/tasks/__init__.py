"""What a fine-tuned model decides: the task heads of ``core.task_head`` put to use.

``classify`` (sequence classification of texts and pairs: every label's score, as transformers'
``text-classification`` pipeline), ``tag`` (token classification: each piece's label, each word's,
and entities grouped as the ``token-classification`` pipeline's ``simple`` strategy),
``spans`` (extractive question answering: the best answer spans, windows over long contexts),
``layer_lens`` (the classifier's head read at every hidden state: where is the decision made?),
``predict`` (one entry point for every task, the records of a labelled file, the JSON the CLI
prints). May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``.
"""

from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "ClassScores": "tasks.classify",
    "Tagging": "tasks.tag",
    "answer": "tasks.spans",
    "Answers": "tasks.spans",
    "layer_decisions": "tasks.layer_lens",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.tasks.classify import ClassScores as ClassScores
    from bertscope.tasks.layer_lens import layer_decisions as layer_decisions
    from bertscope.tasks.spans import Answers as Answers
    from bertscope.tasks.spans import answer as answer
    from bertscope.tasks.tag import Tagging as Tagging
