"""How good is "time left" on the progress bars? Each job runs once as its page runs it, its progress
reports recorded with their times; then the reports are replayed through the old rule (the stage's
mean rate so far, times the steps to go) and the app's ``StageClock`` (a range from the recent rate to
the fitted growth), and each is set against the true time the stage still took, at 10% done.

    python benchmarks/estimates.py [--jobs udhr,probes,faithfulness,finetune]

Prints, per job and stage: steps, the true seconds left at 10%, the old estimate and its ratio to the
truth, the new range and whether it holds the truth.

``finetune`` is the Fine-tuning page's run (bundled on the tweets, LoRA rank 8, 2 epochs of 512 examples, batch
32, held-out scoring after each epoch), started as the page starts it (``TrainingJob.start_finetune``) and polled
as the page polls it: its estimate is the job's own (``Snapshot.seconds_left``: the measured pace of steps plus
the held-out scorings still to come), one figure, printed in the range's column.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class Recorder:
    def __init__(self) -> None:
        self.reports: list[tuple[float, int, int, str]] = []  # (seconds, done, total, stage)
        self.estimates: list[tuple[float, int, int, float | None]] = []  # a training job's: (seconds, step, total, left)
        self.start = time.perf_counter()

    def __call__(self, done: int, total: int, stage: str = "") -> None:
        self.reports.append((time.perf_counter() - self.start, done, total, stage))


def udhr(rec: Recorder) -> None:
    from bertscope import load_model
    from bertscope.analysis.align import embed_parallel
    from bertscope.app.sections.udhr_view import sample_codes
    from bertscope.corpora.udhr import declarations_by_code, udhr_parallel

    lm = load_model("bundled-multilingual")
    complete = sorted(c for c, v in declarations_by_code().items() if len(v.articles) == 30)
    data = udhr_parallel(sample_codes(complete, 25))  # the page's default: 25 versions beside English
    embed_parallel(lm, data, "mean", cache=False, progress=lambda d, t: rec(d, t, "Embedding the articles, word pieces"))


def probes(rec: Recorder) -> None:
    from bertscope import load_model
    from bertscope.analysis.hidden_cache import HiddenStateCache, hidden_states
    from bertscope.analysis.probing import probe_layers
    from bertscope.corpora.suites import shipped_task

    lm = load_model("bundled-mlm")
    task = shipped_task("brown-pos")
    with tempfile.TemporaryDirectory() as tmp:
        states = hidden_states(lm, task, "mean", HiddenStateCache(tmp),
                               progress=lambda d, t: rec(d, t, "Hidden states, word pieces"))
        probe_layers(states, task.name, "mean", progress=lambda d, t: rec(d, t, "Probes, fits"))


def faithfulness(rec: Recorder) -> None:
    from bertscope import load_model
    from bertscope.attribution.faithfulness import faithfulness as board
    from bertscope.attribution.items import brown_items

    lm = load_model("bundled-mlm")
    items = brown_items(lm, 25, 0)
    board(lm, items, progress=lambda d, t: rec(d, t, "Items scored and erased"))


def finetune(rec: Recorder) -> None:
    from bertscope.training.config import FinetuneConfig
    from bertscope.training.job import TrainingJob
    from bertscope.training.task_data import load_task_data

    cfg = FinetuneConfig(task="classify", seq_len=128, lora_rank=8, epochs=2, lr=1e-3, max_examples=512)
    data = load_task_data("classify", "sentiment", held_out=cfg.held_out, seed=cfg.seed)
    with tempfile.TemporaryDirectory() as tmp:
        job = TrainingJob.start_finetune("bundled", data, Path(tmp) / "run", cfg)
        while not job.wait(0.25):  # the page reruns about this often while a run goes
            snap = job.snapshot()
            if snap.total:
                rec.estimates.append((time.perf_counter() - rec.start, snap.step, snap.total, snap.seconds_left))
        snap = job.snapshot()
        if snap.status != "done":
            raise SystemExit(f"the fine-tuning run ended {snap.status}: {snap.error}")
        rec.estimates.append((time.perf_counter() - rec.start, snap.total, snap.total, 0.0))


def job_estimate(estimates: list[tuple[float, int, int, float | None]]) -> dict | None:
    """The job's own estimate at the first poll with 10% of the steps done (and a pace measured), against the time
    the run still took."""
    end, total = estimates[-1][0], estimates[-1][2]
    for t, step, _, left in estimates:
        if step >= total * 0.10 and left is not None:
            return {"stage": "Fine-tuning, steps and held-out scorings", "steps": total, "at": step,
                    "truth": end - t, "estimate": left}
    return None


JOBS = {"udhr": udhr, "probes": probes, "faithfulness": faithfulness, "finetune": finetune}


def replay(reports: list[tuple[float, int, int, str]]) -> list[dict]:
    from bertscope.app.kit.results import StageClock

    out = []
    for stage in dict.fromkeys(r[3] for r in reports):
        rows = [r for r in reports if r[3] == stage]
        total = rows[-1][2]
        if total < 10 or rows[-1][1] < total:
            continue
        end = rows[-1][0]
        now = [0.0]
        clock = StageClock(lambda: now[0])
        first_t, first_d = rows[0][0], rows[0][1]
        answer = None
        for t, done, _, _ in rows:
            now[0] = t
            found = clock.estimate(stage, done, total)
            if done >= total * 0.10 and t - first_t >= 1.0 and found is not None:
                answer = (t, done, found)
                break
        if answer is None:
            continue
        t, done, (low, high) = answer
        truth = end - t
        old = (t - first_t) / (done - first_d) * (total - done)
        out.append({"stage": stage, "steps": total, "at": done, "truth": truth, "old": old, "low": low, "high": high})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", default=",".join(JOBS))
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print("| job | stage | steps | at | true s left | old estimate (ratio) | new range | holds the truth |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.jobs.split(","):
        rec = Recorder()
        JOBS[name](rec)
        if rec.estimates:
            r = job_estimate(rec.estimates)
            if r is not None:
                holds = r["estimate"] * 0.9 <= r["truth"] <= r["estimate"] * 1.1
                print(f"| {name} | {r['stage']} | {r['steps']} | {r['at']} | {r['truth']:.0f} | — | {r['estimate']:.0f} "
                      f"({r['estimate'] / r['truth']:.2f}) | {'yes' if holds else 'no'} |", flush=True)
        for r in replay(rec.reports):
            holds = r["low"] * 0.9 <= r["truth"] <= r["high"] * 1.1
            print(f"| {name} | {r['stage']} | {r['steps']} | {r['at']} | {r['truth']:.0f} | {r['old']:.0f} "
                  f"({r['old'] / r['truth']:.2f}) | {r['low']:.0f}–{r['high']:.0f} | {'yes' if holds else 'no'} |",
                  flush=True)


if __name__ == "__main__":
    main()
