"""Corpus-scale passes on a Ray cluster (Ray Data): head statistics, head importance (gate
gradients summed over batches) and the hidden states behind probes and corpus search, with
``--engine ray`` (a cluster started on this machine) or ``--engine ray:ADDRESS`` (an existing
one: ``auto``, or ``HOST:PORT``).

    >>> with ray_cluster(RayEngine()):                                       # doctest: +SKIP
    ...     stats = head_stats(lm, sentences, RayEngine())
    ...     states = hidden_states(lm, task, "mean", rows=ray_rows(RayEngine()))

How the work is split: this process tokenises the corpus once and plans its batches exactly as
the single-process path does (``core.forward.corpus_plan``: sorted by length, bounded by rows
and bytes); each planned batch becomes one row of a Ray dataset. An actor per GPU of the cluster
(or per CPU slot when it has none) loads the model once and runs BertScope's own batched pass
on the batches it is handed, as they are. What comes back merges the way the single-process
path adds it up: [statistic, layer, head] sums (float64) for statistics; for hidden states each
batch's pooled vectors and the rows they go to, which this process writes into the cache's
own layer files, so the cache entry (key, files, bytes) is the one the app and the
single-process path read and write. The batches being the same, the arrays are the same bytes.

Ray is imported only here, only when an engine is asked for: the app never loads it. Every
actor checks that the weights it loaded are the ones this process fingerprinted (a node with
another copy of a folder would otherwise mix two models), and runs with this process's
``BERTSCOPE_*`` / ``HF_*`` settings and import path.
"""

from __future__ import annotations

import logging
import os
import socket
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from bertscope.analysis.attention_stats import HeadStats, corpus_texts, head_sums
from bertscope.analysis.hidden_cache import Rows, WordTable, pooled_rows, weights_fingerprint
from bertscope.core.forward import corpus_plan
from bertscope.core.models import LoadedModel, load_model
from bertscope.corpora.probe_tasks import ProbeTask
from bertscope.errors import BertScopeError
from bertscope.interventions.importance import HeadImportance

BATCHES_PER_CALL = 4  # planned batches an actor is handed at a time (a Ray Data batch of rows)
HIDDEN_BATCH = 64  # rows of a hidden-state pass, as ``hidden_states``' default


@dataclass(frozen=True)
class RayEngine:
    """Where the passes run: ``address`` None starts a Ray cluster on this machine (its CPUs and
    GPUs); "auto" or "HOST:PORT" joins a running one. ``actors``: how many model copies (default:
    one per GPU of the cluster, else one per CPU)."""

    address: str | None = None
    actors: int | None = None


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


def _import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as err:
        raise BertScopeError("--engine ray needs Ray Data: pip install -r requirements-cluster.txt") from err
    return ray


def _worker_env() -> dict[str, str]:
    """What an actor needs of this process's environment: our settings and the import path."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("BERTSCOPE_", "HF_", "TRANSFORMERS_"))}
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the bertscope package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return env


def _reachable(address: str | None, seconds: float = 5.0) -> None:
    """A HOST:PORT that answers (Ray itself would keep retrying for minutes)."""
    if address is None or address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise BertScopeError(f"A Ray address is auto or HOST:PORT, not {address!r}.")
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as err:
        raise BertScopeError(f"No Ray cluster at {address}: {err.strerror or err}.") from err


@contextmanager
def ray_cluster(engine: RayEngine) -> Iterator[Any]:
    """Ray, connected: a cluster started here (and shut down after), a running one joined, or
    the one this process already initialised (left as it was)."""
    ray = _import_ray()
    if ray.is_initialized():
        yield ray
        return
    _reachable(engine.address)
    try:
        ray.init(address=engine.address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                 configure_logging=True, runtime_env={"env_vars": _worker_env()})
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = engine.address or "this machine"
        raise BertScopeError(f"No Ray cluster at {where}: {str(err).splitlines()[0]}") from err
    try:
        yield ray
    finally:
        ray.shutdown()


def _actors(ray: Any, engine: RayEngine) -> tuple[int, dict]:
    """(how many actors, each one's resources): one per GPU, else one per CPU."""
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), max(1, int(resources.get("CPU", 1)))
    if engine.actors is not None and engine.actors < 1:
        raise BertScopeError("The Ray engine needs at least one actor.")
    if gpus:
        return engine.actors or gpus, {"num_gpus": 1, "num_cpus": max(1, cpus // gpus)}
    return engine.actors or cpus, {"num_cpus": 1}


class _Passes:
    """One Ray actor: the model loaded once, BertScope's own passes over the planned batches it is
    handed. ``job``: "heads" (statistics sums) or "hidden" (pooled vectors and their rows)."""

    def __init__(self, name: str, dtype: str, fingerprint: str, job: str, on_gpu: bool,
                 table: WordTable | None = None, pooling: str = "mean") -> None:
        self.lm = load_model(name, device="cuda" if on_gpu else "cpu", dtype=dtype)
        if weights_fingerprint(self.lm) != fingerprint:
            raise BertScopeError(f"A Ray node loaded other weights for {name} than this machine: give every node "
                                 "the same files (shared storage) or a hub id.")
        self.job, self.table, self.pooling = job, table, pooling

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.job == "importance":
            return self._importance(rows)
        parts = [np.asarray(i, np.int64) for i in rows["indices"]]  # per planned batch: [sentence] task numbering
        texts = [str(t) for part in rows["texts"] for t in part]
        ends = np.cumsum([len(p) for p in parts])
        plan = [list(range(end - len(p), end)) for p, end in zip(parts, ends)]  # the batches, as planned
        if self.job == "heads":
            total, tokens = head_sums(self.lm, texts, plan=plan)
            return {"sums": total[None], "tokens": np.array([tokens]), "sentences": np.array([len(texts)])}
        out: dict[str, list] = {"sentences": [], "rows": [], "vectors": []}
        for sentences, destination, vectors in pooled_rows(self.lm, texts, self.table, self.pooling, plan=plan,
                                                           indices=np.concatenate(parts)):
            out["sentences"].append(sentences)
            out["rows"].append(destination)
            out["vectors"].append(vectors.reshape(-1))  # [example x (layer + 1) x dim]
        return {"sentences": np.array(out["sentences"]), "rows": _ragged(out["rows"], np.int64),
                "vectors": _ragged(out["vectors"], np.float32)}


    def _importance(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Σ|∂L/∂ξ| over the corrupted batches handed over (each row one batch, flattened)."""
        import torch

        from bertscope.heads.masking import IGNORE_INDEX
        from bertscope.interventions.importance import batch_gradient, new_gates

        gates = new_gates(self.lm)
        total = torch.zeros(self.lm.num_layers, self.lm.num_heads, device=self.lm.device)
        tokens = positions = sentences = 0
        loss_sum = 0.0
        for i, shape in enumerate(rows["shape"]):
            shape = tuple(int(x) for x in shape)  # [batch, token]
            feed = {k: torch.from_numpy(np.asarray(rows[k][i], np.int64).reshape(shape)).to(self.lm.device)
                    for k in FEED_KEYS if k in rows and len(rows[k][i])}
            labels = torch.from_numpy(np.asarray(rows["labels"][i], np.int64).reshape(shape)).to(self.lm.device)
            chosen = labels != IGNORE_INDEX  # [batch, token]
            grad, loss = batch_gradient(self.lm, gates, feed, chosen, labels[chosen])
            total += grad
            tokens += int(feed["attention_mask"].sum())
            positions += int(chosen.sum())
            loss_sum += loss * int(chosen.sum())
            sentences += shape[0]
        return {"sums": total.double().cpu().numpy()[None], "tokens": np.array([tokens]),
                "positions": np.array([positions]), "loss_sum": np.array([loss_sum]),
                "sentences": np.array([sentences])}


FEED_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def _ragged(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
    """An object array of 1-D arrays (Ray Data's column of variable-length arrays)."""
    column = np.empty(len(arrays), dtype=object)
    column[:] = [np.asarray(a, dtype) for a in arrays]
    return column


def _run(ray: Any, engine: RayEngine, lm: LoadedModel, texts: Sequence[str], plan: list[list[int]],
         job: str, items: list[dict] | None = None, **job_args) -> Iterator[dict[str, Any]]:
    """The planned batches through the actors (or ``items``, rows made here: one batch each, in
    the order to hand them out); yields each output row as it arrives."""
    import ray.data

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    count, resources = _actors(ray, engine)
    numbering = np.arange(len(texts))  # each text's place in the corpus (the word table's numbering)
    # longest batches first (the plan is sorted by length): the actors share out the heavy work
    # early and the small batches fill the end, instead of one actor finishing the longest alone
    if items is None:
        items = [{"indices": numbering[batch], "texts": [texts[i] for i in batch]} for batch in reversed(plan)]
    dataset = ray.data.from_items(items, override_num_blocks=max(1, -(-len(items) // BATCHES_PER_CALL)))
    dtype = {"torch.float16": "float16", "torch.bfloat16": "bfloat16"}.get(str(lm.dtype), "auto")
    done = dataset.map_batches(
        _Passes, batch_size=BATCHES_PER_CALL, batch_format="numpy", concurrency=count,
        fn_constructor_kwargs={"name": lm.name, "dtype": dtype, "fingerprint": weights_fingerprint(lm), "job": job,
                               "on_gpu": "num_gpus" in resources, **job_args},
        runtime_env={"env_vars": _worker_env()}, **resources)
    try:
        yield from done.iter_rows()
    except Exception as err:  # noqa: BLE001 - an actor's failure arrives wrapped by Ray
        raise BertScopeError(_first_line(err)) from err


def _first_line(err: BaseException) -> str:
    """An actor's own one-line error (``BertScopeError``), else Ray's first line."""
    text = str(err)
    for line in text.splitlines():
        if "BertScopeError: " in line:
            return line.split("BertScopeError: ", 1)[1].strip()
    return "The Ray engine failed: " + (text.strip().splitlines() or [type(err).__name__])[0]


def head_stats(lm: LoadedModel, sentences: Sequence[str], engine: RayEngine, batch_size: int = 32,
               progress: Callable[[int, int], None] | None = None) -> HeadStats:
    """``analysis.attention_stats.head_stats`` with the batches run by the cluster's actors and
    their sums added here (any number of sentences)."""
    texts = corpus_texts(sentences, limit=None)
    plan = corpus_plan(lm, texts, batch_size, with_attentions=True, with_hidden_states=False)
    total, tokens, done = 0.0, 0, 0
    with ray_cluster(engine) as ray:
        for row in _run(ray, engine, lm, texts, plan, "heads"):
            total = total + np.asarray(row["sums"], np.float64)  # [statistic, layer, head]
            tokens += int(row["tokens"])
            done += int(row["sentences"])
            if progress is not None:
                progress(done, len(texts))
    return HeadStats.from_sums(total, len(texts), tokens)


def head_importance(lm: LoadedModel, texts: Sequence[str], engine: RayEngine, batch_size: int = 16, seed: int = 0,
                    progress: Callable[[int, int], None] | None = None) -> HeadImportance:
    """``interventions.importance.head_importance`` with the gate gradients computed by the
    cluster's actors: the batches and BERT's corruption of them are drawn here, in the single-process
    order and with its seed (so the masked positions are the same), and the sums added here."""
    import torch

    from bertscope.heads.fill_mask import require_mlm
    from bertscope.heads.masking import IGNORE_INDEX
    from bertscope.interventions.importance import importance_from_sums, masked_batches

    require_mlm(lm)
    if not texts:
        raise BertScopeError("Head importance needs at least one sentence.")
    items = []
    for rows, feed, chosen, gold in masked_batches(lm, texts, batch_size, seed):
        labels = torch.full(chosen.shape, IGNORE_INDEX, dtype=torch.long, device=chosen.device)
        labels[chosen] = gold  # [batch, token]
        flat = {k: feed[k].cpu().numpy().astype(np.int32).ravel() for k in FEED_KEYS if k in feed}
        items.append({**flat, "labels": labels.cpu().numpy().astype(np.int32).ravel(),
                      "shape": np.array(chosen.shape, np.int64)})
    items.reverse()  # longest first, as for the other jobs
    total, tokens, positions, loss_sum, done = 0.0, 0, 0, 0.0, 0
    with ray_cluster(engine) as ray:
        for row in _run(ray, engine, lm, texts, [], "importance", items=items):
            total = total + np.asarray(row["sums"], np.float64)  # [layer, head]
            tokens += int(row["tokens"])
            positions += int(row["positions"])
            loss_sum += float(row["loss_sum"])
            done += int(row["sentences"])
            if progress is not None:
                progress(done, len(texts))
    return importance_from_sums(total, tokens, positions, loss_sum, len(texts))


def ray_rows(engine: RayEngine) -> Callable[[LoadedModel, ProbeTask, WordTable | None, str, int], Rows]:
    """A source of pooled vectors for ``hidden_states(..., rows=...)``: the task's batches, planned
    here as the single-process path plans them, run by the cluster's actors."""

    def rows(lm: LoadedModel, task: ProbeTask, table: WordTable | None, pooling: str, batch_size: int) -> Rows:
        texts = task.texts
        plan = corpus_plan(lm, texts, batch_size, with_attentions=False, with_hidden_states=True)
        with ray_cluster(engine) as ray:
            for row in _run(ray, engine, lm, texts, plan, "hidden", table=table, pooling=pooling):
                vectors = np.asarray(row["vectors"], np.float32).reshape(-1, lm.num_layers + 1, lm.hidden_size)
                yield int(row["sentences"]), np.asarray(row["rows"], np.int64), vectors

    return rows


def rows_for(spec: str | None) -> Callable | None:
    """``--engine``'s source of hidden states for ``hidden_states(rows=...)``: None for local."""
    engine = parse_engine(spec)
    return None if engine is None else ray_rows(engine)
