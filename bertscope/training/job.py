"""Either of BERT's stages as a background job: what the Pretraining and Fine-tuning pages start,
watch and cancel.

    job = TrainingJob.start("bundled", train_docs, held_docs, "runs/mine", RecipeConfig(epochs=1))
    job = TrainingJob.start_finetune("bundled", load_task_data("classify", "sentiment"), "runs/s", FinetuneConfig())
    job.snapshot()          # status, step, total, losses so far, epochs finished, error
    job.cancel(); job.wait()

One thread per job runs ``recipe.train`` or ``fine_tuning.finetune`` with a progress callback and a stop flag; the
job keeps every step's loss (a float each) and reads the run folder's ``metrics.json`` when
the run ends. At most ``MAX_JOBS`` jobs train at once in a process (hosted use: one visitor
cannot fill the machine); a start beyond that is refused with a one-line error.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertscope.errors import BertScopeError
from bertscope.runtime.devices import resolve_device
from bertscope.training.config import CLOZE, FinetuneConfig, RecipeConfig, check_cloze
from bertscope.training.recipe import train
from bertscope.training.task_metrics import FinetuneMetrics, read_task_metrics

MAX_JOBS = 1
_RUNNING = threading.BoundedSemaphore(MAX_JOBS)


def _device_label(device: str) -> str:
    import torch

    resolved = resolve_device(device)
    if resolved.type == "cuda":
        return torch.cuda.get_device_name(resolved)
    return f"the CPU ({torch.get_num_threads()} threads)" if resolved.type == "cpu" else "Apple's GPU (mps)"


def _numbers(values: list) -> list[float]:
    """Per-step losses as floats: the steps' 0-dim device tensors read in one copy (floats stay)."""
    fresh = [i for i, v in enumerate(values) if not isinstance(v, float)]
    if not fresh:
        return values
    import torch

    out = list(values)
    for i, v in zip(fresh, torch.stack([values[i].detach().double() for i in fresh]).tolist()):
        out[i] = v
    return out


@dataclass
class Snapshot:
    status: str  # "running", "done", "cancelled", "failed"
    step: int
    total: int
    losses: list[float]  # the loss (masked-LM, or the task's), one per optimiser step
    pair_losses: list[float]  # NSP / SOP loss per step (empty without a pair task)
    epochs: list[dict]  # per finished epoch: train loss, held-out loss / top-1 / top-5
    error: str | None
    metrics: FinetuneMetrics | dict | None  # once done: a fine-tuning run's typed figures, or pretraining's
    # metrics.json (before/after held-out figures and cloze predictions)
    out: str
    elapsed: float  # seconds since the job started
    seconds_per_step: float | None  # the measured pace of steps within an epoch (None before the second step)
    scoring_seconds: float = 0.0  # one held-out scoring: measured at an epoch's end, else the time before step 1
    scorings_left: int = 0  # held-out scorings still to come (one after each epoch not yet ended)

    @property
    def seconds_left(self) -> float | None:
        """The steps still to run at the measured pace, plus the held-out scorings still to come at their
        measured length: both from this run on this machine, so the figure settles as the run goes."""
        if self.seconds_per_step is None or self.status != "running":
            return None
        return self.seconds_per_step * max(0, self.total - self.step) + self.scoring_seconds * self.scorings_left


@dataclass(eq=False)
class TrainingJob:
    model_name: str
    out: Path
    cfg: Any  # RecipeConfig or FinetuneConfig
    device_label: str = "the CPU"  # where it trains, in words
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _step: int = 0
    _total: int = 0
    _losses: list = field(default_factory=list)
    _pair_losses: list = field(default_factory=list)
    _started: float = field(default_factory=time.monotonic)
    _first_step: tuple[int, float] | None = None  # (step, time) of the first step seen
    _last_epoch: int = 0  # the epoch of the last step seen
    _step_seconds: float = 0.0  # time between consecutive steps of one epoch, summed
    _step_gaps: int = 0  # how many such gaps
    _scoring: float | None = None  # one held-out scoring, measured at an epoch boundary
    _last_step_at: float = 0.0
    _status: str = "running"
    _error: str | None = None
    _epochs: list = field(default_factory=list)

    @classmethod
    def start(cls, model_name: str, train_documents: Sequence[Sequence[str]],
              held_out_documents: Sequence[Sequence[str]], out: str | Path, cfg: RecipeConfig,
              device: str = "auto", cloze_texts: Sequence[str] = CLOZE,
              on_done: Callable[[], None] | None = None) -> TrainingJob:
        """Pretraining (``recipe.train``) in the background; ``on_done()`` runs when its thread ends, however it
        ends (a hosted demo's budget slot is released there)."""
        cfg.check()
        cloze_texts = check_cloze(cloze_texts)
        if not train_documents or not held_out_documents:
            raise BertScopeError("Training needs documents to train on and held-out documents to score.")
        return cls._launch(model_name, out, cfg, device, lambda job: train(
            model_name, train_documents, held_out_documents, job.out, cfg, device, progress=job._progress,
            stop=job._stop.is_set, cloze_texts=cloze_texts), on_done)

    @classmethod
    def start_finetune(cls, model_name: str, data, out: str | Path, cfg, device: str = "auto",
                       on_done: Callable[[], None] | None = None) -> TrainingJob:
        """The second stage on ``data`` (``task_data.TaskData``) in the background; ``on_done`` as ``start``'s."""
        from bertscope.training.fine_tuning import finetune

        cfg.check()
        data.check()
        return cls._launch(model_name, out, cfg, device, lambda job: finetune(
            model_name, data, job.out, cfg, device, progress=job._progress, stop=job._stop.is_set), on_done)

    @classmethod
    def _launch(cls, model_name: str, out: str | Path, cfg, device: str, work,
                on_done: Callable[[], None] | None) -> TrainingJob:
        label = _device_label(device)  # an unknown device is refused before a slot is taken
        if not _RUNNING.acquire(blocking=False):
            raise BertScopeError(f"{MAX_JOBS} training run(s) already use this server: wait for it to end.")
        job = cls(model_name, Path(out), cfg, label)
        thread = threading.Thread(target=job._run, args=(work, on_done), name=f"training-{model_name}", daemon=True)
        thread.start()
        return job

    def _run(self, work, on_done: Callable[[], None] | None = None) -> None:
        try:
            state = work(self)
            with self._lock:
                self._epochs = [{k: v for k, v in h.items() if k != "before"} for h in state.history]
                self._status = "cancelled" if self._stop.is_set() else "done"
        except BertScopeError as err:
            with self._lock:
                self._status, self._error = "failed", str(err)
        except Exception as err:  # noqa: BLE001 - a thread must report, not die silently
            with self._lock:
                self._status, self._error = "failed", f"{type(err).__name__}: {err}".splitlines()[0]
        finally:
            _RUNNING.release()
            if on_done is not None:
                on_done()
            self._done.set()

    def _progress(self, step: int, total: int, info: dict) -> None:
        with self._lock:
            self._step, self._total = step, total
            self._losses.append(info["loss"])  # read in ``snapshot``: a read here would wait for the GPU a step
            if "pair_loss" in info:
                self._pair_losses.append(info["pair_loss"])
            now = time.monotonic()
            epoch = int(info.get("epoch", 1))
            if self._first_step is None:
                self._first_step = (step, now)  # from here on: steps only, not loading and the first scoring
            elif epoch == self._last_epoch:
                self._step_seconds += now - self._last_step_at
                self._step_gaps += 1
            elif self._step_gaps:  # the gap across an epoch's end holds one step and one held-out scoring
                self._scoring = max(0.0, now - self._last_step_at - self._step_seconds / self._step_gaps)
            self._last_step_at, self._last_epoch = now, epoch

    def cancel(self) -> None:
        """Ask the run to stop between steps (what was trained so far is kept in its checkpoint)."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def snapshot(self) -> Snapshot:
        with self._lock:
            metrics = None
            file = self.out / "metrics.json"
            if self._status == "done" and file.is_file():  # a fine-tuning run's, typed (pretraining's: the dict)
                metrics = read_task_metrics(file) if isinstance(self.cfg, FinetuneConfig) else \
                    json.loads(file.read_text())
            pace = self._step_seconds / self._step_gaps if self._step_gaps else None
            # before any epoch has ended, the time before the first step (loading and the scoring before
            # training) stands for one scoring: an upper bound that the first measured one replaces
            scoring = self._scoring if self._scoring is not None else (
                self._first_step[1] - self._started if self._first_step is not None else 0.0)
            epochs = int(getattr(self.cfg, "epochs", 1) or 1)
            self._losses, self._pair_losses = _numbers(self._losses), _numbers(self._pair_losses)
            return Snapshot(self._status, self._step, self._total, list(self._losses), list(self._pair_losses),
                            list(self._epochs), self._error, metrics, str(self.out),
                            time.monotonic() - self._started, pace, scoring,
                            max(0, epochs - max(self._last_epoch, 1) + 1) if self._first_step is not None else 0)
