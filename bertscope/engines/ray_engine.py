"""Corpus-scale passes on a Ray cluster (Ray Data): head statistics, head importance (gate
gradients summed over batches), the hidden states behind probes and corpus search, the
faithfulness test (whole items), the layer-by-layer comparison of two models (CKA's HSIC
sums per chunk of sentences) and a corpus's sentence embeddings (a search index), with
``--engine ray`` (a cluster started on this machine) or ``--engine ray:ADDRESS`` (an existing
one: ``auto``, or ``HOST:PORT``).

    >>> stats = head_stats(lm, sentences, engine=RayEngine())                # doctest: +SKIP
    >>> states = hidden_states(lm, task, "mean", engine=RayEngine())         # doctest: +SKIP

``RayEngine`` is the library's ``runtime.engine.Engine``: the library's own ``head_stats``,
``head_importance``, ``hidden_states``, ``faithfulness``, ``compare_layers`` and ``retrieval.embed``
plan the work and merge what comes back; the methods here only run it on the cluster.

How the work is split: this process tokenises the corpus once and plans its batches exactly as
the single-process path does (``core.batch_plan.corpus_plan``: sorted by length, bounded by rows
and bytes; a sentence embedding's ``retrieval.embedding.embedding_plan``); each planned batch becomes one row of a Ray dataset. An actor per GPU of the cluster
(or per CPU slot when it has none) loads the model once and runs BertScope's own batched pass
on the batches it is handed, as they are. What comes back merges the way the single-process
path adds it up: [statistic, layer, head] sums (float64) for statistics; for hidden states each
batch's pooled vectors and the rows they go to, which this process writes into the cache's
own layer files, so the cache entry (key, files, bytes) is the one the app and the
single-process path read and write; for sentence embeddings each batch's vectors and their rows.
The batches being the same, the arrays are the same bytes.
Work that is not batches of one pass goes out whole: a faithfulness item (every method's scores
and its deletion batch, ``item_result``) or a chunk of sentences through both compared models
(``chunk_sums``); results come back in order, so the scoreboard and the CKA matrix are this
process's.

The pieces: ``ray_cluster`` (where it runs; Ray is imported there only, only when an engine is
asked for: the app never loads it) and ``ray_actor`` (the model actor). Every
actor checks that the weights it loaded are the ones this process fingerprinted (a node with
another copy of a folder would otherwise mix two models), and runs with this process's
``BERTSCOPE_*`` / ``HF_*`` settings and import path.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.analysis.hidden_cache import Rows, WordTable, weights_fingerprint
from bertscope.core.batch_plan import corpus_plan
from bertscope.core.models import LoadedModel
from bertscope.corpora.probe_tasks import ProbeTask
from bertscope.engines.ray_actor import FEED_KEYS, ModelActor
from bertscope.engines.ray_cluster import ClusterSpec, actor_resources, ray_cluster, worker_env
from bertscope.errors import BertScopeError

if TYPE_CHECKING:  # the faithfulness test, CKA and retrieval are imported by the commands that use them
    from bertscope.analysis.compare import ChunkSums
    from bertscope.attribution.faithfulness import ItemResult
    from bertscope.attribution.items import Item
    from bertscope.retrieval.settings import EmbeddingSettings

BATCHES_PER_CALL = 4  # planned batches an actor is handed at a time (a Ray Data batch of rows)

__all__ = ["RayEngine", "parse_engine", "ray_cluster"]


def _run(ray: Any, engine: ClusterSpec, lm: LoadedModel, texts: Sequence[str], plan: list[list[int]],
         job: str, items: list[dict] | None = None, per_call: int = BATCHES_PER_CALL, ordered: bool = False,
         **job_args) -> Iterator[dict[str, Any]]:
    """The planned batches through the actors (or ``items``, rows made here, in the order to hand
    them out; ``per_call`` of them to an actor at a time); yields each output row as it arrives.
    A row may carry a Python object (a faithfulness item, a chunk of sentences): Ray Data keeps
    such a column in its own serialised form, and only the actor given the row receives it.
    ``ordered``: rows come back in the order they went out, else as they are done."""
    import ray.data

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    context.execution_options.preserve_order = ordered
    # our progress bar and one-line errors speak; Ray Data logs its notices and tracebacks otherwise
    logging.getLogger("ray.data").setLevel(logging.CRITICAL)
    count, resources = actor_resources(ray, engine)
    numbering = np.arange(len(texts))  # each text's place in the corpus (the word table's numbering)
    # longest batches first (the plan is sorted by length): the actors share out the heavy work
    # early and the small batches fill the end, instead of one actor finishing the longest alone
    if items is None:
        items = [{"indices": numbering[batch], "texts": [texts[i] for i in batch]} for batch in reversed(plan)]
    blocks = max(1, -(-len(items) // per_call))
    dataset = ray.data.from_items(items, override_num_blocks=blocks)
    with warnings.catch_warnings():
        # max_restarts has no named parameter on Ray 2.60 (pinned): passed as a remote argument
        warnings.simplefilter("ignore", DeprecationWarning)
        done = _map(dataset, ray, lm, job, resources, per_call, min(count, blocks), job_args)
    try:
        yield from done.iter_rows()
    except Exception as err:  # noqa: BLE001 - an actor's failure arrives wrapped by Ray
        raise BertScopeError(_first_line(err)) from err


def _map(dataset: Any, ray: Any, lm: LoadedModel, job: str, resources: dict, per_call: int, actors: int,
         job_args: dict) -> Any:
    """The dataset through a pool of model actors. An actor that dies is not restarted (Ray's
    default restarts it without end, and a batch that kills it would kill every new one): the
    job ends with one line naming the cause."""
    dtype = {"torch.float16": "float16", "torch.bfloat16": "bfloat16"}.get(str(lm.dtype), "auto")
    return dataset.map_batches(
        ModelActor, batch_size=per_call, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=actors),
        fn_constructor_kwargs={"name": lm.name, "dtype": dtype, "fingerprint": weights_fingerprint(lm), "job": job,
                               "on_gpu": "num_gpus" in resources, **job_args},
        runtime_env={"env_vars": worker_env()}, max_restarts=0, **resources)


def _first_line(err: BaseException) -> str:
    """An actor's own one-line error (``BertScopeError``), else Ray's first line."""
    text = str(err)
    for line in text.splitlines():
        if "BertScopeError: " in line:
            return line.split("BertScopeError: ", 1)[1].strip()
    return "The Ray engine failed: " + (text.strip().splitlines() or [type(err).__name__])[0]


@dataclass(frozen=True)
class RayEngine(ClusterSpec):
    """A Ray cluster as the library's engine (``runtime.engine.Engine``): ``address`` None starts
    one on this machine, "auto" or "HOST:PORT" joins a running one."""

    def head_sums(self, lm: LoadedModel, texts: list[str], batch_size: int,
                  progress: Callable[[int, int], None] | None) -> tuple[np.ndarray, int]:
        """The batches planned here as the single process plans them, run by the actors; their
        [statistic, layer, head] sums added here."""
        plan = corpus_plan(lm, texts, batch_size, with_attentions=True, with_hidden_states=False)
        total, tokens, done = 0.0, 0, 0
        with ray_cluster(self) as ray:
            for row in _run(ray, self, lm, texts, plan, "heads"):
                total = total + np.asarray(row["sums"], np.float64)  # [statistic, layer, head]
                tokens += int(row["tokens"])
                done += int(row["sentences"])
                if progress is not None:
                    progress(done, len(texts))
        return np.asarray(total, np.float64), tokens

    def importance_sums(self, lm: LoadedModel, texts: Sequence[str], batch_size: int, seed: int,
                        progress: Callable[[int, int], None] | None) -> tuple[np.ndarray, int, int, float]:
        """The batches and BERT's corruption of them drawn here (the single process's order and
        seed: the same masked positions), their gate gradients taken by the actors, summed here."""
        import torch

        from bertscope.interventions.importance import masked_batches
        from bertscope.mlm.masking import IGNORE_INDEX

        items = []
        for _rows, feed, chosen, gold in masked_batches(lm, texts, batch_size, seed):
            labels = torch.full(chosen.shape, IGNORE_INDEX, dtype=torch.long, device=chosen.device)
            labels[chosen] = gold  # [batch, token]
            flat = {k: feed[k].cpu().numpy().astype(np.int32).ravel() for k in FEED_KEYS if k in feed}
            items.append({**flat, "labels": labels.cpu().numpy().astype(np.int32).ravel(),
                          "shape": np.array(chosen.shape, np.int64)})
        items.reverse()  # longest first, as for the other jobs
        total, tokens, positions, loss_sum, done = 0.0, 0, 0, 0.0, 0
        with ray_cluster(self) as ray:
            for row in _run(ray, self, lm, texts, [], "importance", items=items):
                total = total + np.asarray(row["sums"], np.float64)  # [layer, head]
                tokens += int(row["tokens"])
                positions += int(row["positions"])
                loss_sum += float(row["loss_sum"])
                done += int(row["sentences"])
                if progress is not None:
                    progress(done, len(texts))
        return np.asarray(total, np.float64), tokens, positions, loss_sum

    def hidden_rows(self, lm: LoadedModel, task: ProbeTask, table: WordTable | None, pooling: str,
                    batch_size: int) -> Rows:
        """The task's batches, planned here as the single process plans them, pooled by the actors."""
        texts = task.texts
        plan = corpus_plan(lm, texts, batch_size, with_attentions=False, with_hidden_states=True)
        with ray_cluster(self) as ray:
            for row in _run(ray, self, lm, texts, plan, "hidden", table=table, pooling=pooling):
                vectors = np.asarray(row["vectors"], np.float32).reshape(-1, lm.num_layers + 1, lm.hidden_size)
                yield int(row["pieces"]), np.asarray(row["rows"], np.int64), vectors

    def embedding_rows(self, lm: LoadedModel, inputs: list[str], plan: list[list[int]], kind: str | None,
                       settings: EmbeddingSettings) -> Iterator[tuple[list[int], np.ndarray]]:
        """A corpus's sentence embeddings: the batches planned here (``retrieval.embedding.embedding_plan``,
        longest first), each embedded by an actor as this process embeds it (``embed_batch``, with these
        ``settings``: an actor that reads others from its copy of the model stops with one line), yielded as
        they are done with their rows."""
        with ray_cluster(self) as ray:
            # _run hands the plan out last batch first: reversed here, the longest batches go out first
            options = {"kind": kind, "settings": settings}
            for row in _run(ray, self, lm, inputs, list(reversed(plan)), "embed", options=options):
                rows = np.asarray(row["indices"], np.int64)
                yield rows.tolist(), np.asarray(row["vectors"], np.float32).reshape(len(rows), -1)

    def item_results(self, lm: LoadedModel, items: Sequence[Item], methods: Sequence[str], removal: str,
                     steps: int, seed: int, progress: Callable[[int, int], None] | None = None) -> list[ItemResult]:
        """The faithfulness items (made here) to the actors one at a time, each scored by every
        method and erased there (``item_result``, as in this process); back in the items' order."""
        found: dict[int, ItemResult] = {}
        with ray_cluster(self) as ray:
            options = {"methods": tuple(methods), "removal": removal, "steps": steps, "seed": seed}
            rows = [{"index": i, "item": item} for i, item in enumerate(items)]
            for row in _run(ray, self, lm, [], [], "faithfulness", items=rows, per_call=1, options=options):
                index = int(row["index"])
                found[index] = replace(row["result"], item=items[index])
                if progress is not None:
                    progress(len(found), len(items))
        return [found[i] for i in range(len(items))]

    def chunk_sums(self, lm_a: LoadedModel, lm_b: LoadedModel, chunks: Sequence[ProbeTask], pool: str,
                   minibatch: int, seed: int) -> Iterator[ChunkSums]:
        """Each chunk of sentences to an actor holding both models; the sums yielded in chunk order
        (Ray Data keeps the order, holding a chunk that comes back early in its object store), so
        the left-over words join the minibatches in order, as in this process."""
        with ray_cluster(self) as ray:
            options = {"model_b": lm_b.name, "fingerprint_b": weights_fingerprint(lm_b), "pool": pool,
                       "minibatch": minibatch, "seed": seed}
            rows = [{"index": i, "chunk": chunk} for i, chunk in enumerate(chunks)]
            for row in _run(ray, self, lm_a, [], [], "cka", items=rows, per_call=1, ordered=True, options=options):
                yield row["sums"]


def parse_engine(spec: str | None) -> RayEngine | None:
    """``local`` (None: this process), ``ray`` or ``ray:ADDRESS``."""
    spec = (spec or "local").strip()
    if spec == "local":
        return None
    if spec == "ray":
        return RayEngine()
    if spec.startswith("ray:") and spec[4:].strip():
        return RayEngine(spec[4:].strip())
    raise BertScopeError(f"Unknown engine {spec!r}: use local, ray (a cluster on this machine) or ray:ADDRESS "
                         "(auto, or HOST:PORT of a running cluster).")
