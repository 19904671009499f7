"""What runs a corpus-wide job's work beyond this process: the one ``engine=`` argument of the
library's long jobs (``head_stats``, ``head_importance``, ``hidden_states`` and corpus search's
``analysis.corpus_search.build_index``, ``faithfulness``, ``compare_layers``, and a corpus's
sentence embeddings: ``retrieval.embed`` and ``retrieval.search.build_index``). None runs everything here; ``engines.ray_engine.RayEngine``
hands the work to a Ray cluster's model actors. The library plans the work and merges what comes
back exactly as it does alone (so results are the single process's); an engine only runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

Progress = Callable[[int, int], None] | None


class Engine(Protocol):
    def head_sums(self, lm: Any, texts: list[str], batch_size: int, progress: Progress) -> tuple[np.ndarray, int]:
        """[statistic, layer, head] sums (float64) over ``texts`` and the real tokens seen."""

    def importance_sums(self, lm: Any, texts: Sequence[str], batch_size: int, seed: int, progress: Progress
                        ) -> tuple[np.ndarray, int, int, float]:
        """Σ|∂L/∂ξ| ([layer, head]) over the seeded masked batches, tokens, masked positions, Σ loss."""

    def hidden_rows(self, lm: Any, task: Any, table: Any, pooling: str, batch_size: int
                    ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """Per batch: (its word pieces, special tokens included, as ``hidden_cache.count_pieces`` counts them;
        destination rows; pooled vectors [example, layer + 1, dim])."""

    def item_results(self, lm: Any, items: Sequence[Any], methods: Sequence[str], removal: str, steps: int,
                     seed: int, progress: Progress) -> list[Any]:
        """Each faithfulness item's result, in the items' order."""

    def chunk_sums(self, lm_a: Any, lm_b: Any, chunks: Sequence[Any], pool: str, minibatch: int, seed: int
                   ) -> Iterator[Any]:
        """Each chunk's CKA sums, in chunk order."""

    def embedding_rows(self, lm: Any, inputs: list[str], plan: list[list[int]], kind: str | None, settings: Any
                       ) -> Iterator[tuple[list[int], np.ndarray]]:
        """Per planned batch of the prepared ``inputs`` (``retrieval.embedding.embedding_plan``), embedded with
        ``settings`` as it is done: (its rows, their embeddings [batch, dim] float32)."""
