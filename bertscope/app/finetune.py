"""Fine-tuning: BERT's second stage run here (a task head on the sidebar's encoder, trained on the tweets,
the BBC topics, EWT's parts of speech, Brown's tags, SQuAD's questions or your file) as a background job with live
curves, a Stop that keeps the last finished epoch, and the finished model one click away."""


from dataclasses import dataclass

import pandas as pd
import streamlit as st

from bertscope import BertScopeError
from bertscope.analysis.frozen_layers import TITLES, shipped_table
from bertscope.app.kit.chrome import PLOT_CONFIG, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_upload, demo
from bertscope.app.kit.model_picker import chosen_model_name, require_model
from bertscope.app.kit.pages import page as page_record
from bertscope.app.kit.training import live_run, open_in_sidebar, run_folder, start_training, training_gate
from bertscope.app.kit.uploads import keep_upload
from bertscope.figures.tasks import confusion_heatmap
from bertscope.training.config import FinetuneConfig
from bertscope.training.job import TrainingJob
from bertscope.training.task_data import SHIPPED, SPAN, TAG, load_task_data
from bertscope.training.task_metrics import SpanScores, scores_from_json

JOB = "finetune_job"
DATA = {"sentiment": "Tweets with sentiment (3 classes)", "topics": "BBC News topics (5 classes)",
        "ewt-upos": "EWT parts of speech (17 UPOS tags)", "brown-pos": "Brown parts of speech (12 tags)",
        "squad": "SQuAD v1.1 questions (answer spans)", "file": "My file"}
TASKS = {"classify": "a label per text", "pairs": "a label per text pair", "tag": "a label per word",
         "span": "an answer span per question"}
BUDGETS = [256, 1024, 4096, 16384, 0]  # 0: every training example
HELD_BUDGETS = [256, 1024, 4096, 0]  # 0: the whole held-out side
RATES = [1e-5, 3e-5, 5e-5, 1e-4, 3e-4, 5e-4, 1e-3, 3e-3]


def feature_based_or_fine_tuned() -> None:
    """The BERT paper's Table 7 question on EWT parts of speech, as measured and shipped."""
    with st.expander("Feature-based or fine-tuned? The BERT paper's Table 7 question, on EWT parts of speech"):
        with page_errors(stop=False):
            table = shipped_table()
            rows = [{"features": TITLES[r["features"]], "width": r["width"], "dev accuracy": r["accuracy"],
                     "dev macro-F1": r["macro_f1"]} for r in table["rows"]]
            tuned = table.get("fine_tuned")
            if tuned:
                rows.append({"features": f"fine-tuned ({tuned['model']})", "width": None, "dev accuracy": tuned["accuracy"],
                             "dev macro-F1": tuned["macro_f1"]})
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch",
                         column_config={"dev accuracy": st.column_config.NumberColumn(format="%.4f"),
                                        "dev macro-F1": st.column_config.NumberColumn(format="%.4f")})
            mix = next((r for r in table["rows"] if r["features"] == "weighted_sum"), None)
            st.caption(plain(
                f"{table['model']}'s frozen word states (each word's first piece) under one linear probe each, trained "
                f"on {table['train_words']:,} EWT training words and scored on its {table['dev_words']:,} dev words; "
                "beside the same encoder fine-tuned as a tagger. Devlin et al. found the concatenation of the last "
                "four layers within 0.3 F1 of fine-tuning for NER (with a two-layer BiLSTM on top; here a linear "
                "probe)."
                + (" The learned weights of the weighted sum, embeddings first: "
                   + ", ".join(f"{w:.2f}" for w in mix["state_weights"]) + "." if mix else "")
                + " Measured by benchmarks/frozen_layers.py."))



@dataclass(frozen=True)
class FtForm:
    """What the form asked for."""

    data_name: str
    file_task: str | None
    uploaded: object
    budget: int
    held_budget: int
    epochs: int
    rank: int
    lr: float
    seq_len: int
    weights: bool
    by_length: bool
    start: bool


def ft_form(name: str, running: bool) -> FtForm:
    """The data (outside the form: a file's own inputs show only when a file is chosen) and the run's settings."""
    budgets = [b for b in BUDGETS if not demo() or 0 < b <= 1024]
    data_name = st.radio("Data", list(DATA), format_func=DATA.get, key="ft_data", horizontal=True)
    file_task, uploaded = None, None
    with st.form("ft_form"):
        if data_name == "file":
            c1, c2 = st.columns([1, 2])
            file_task = c1.radio("Task", list(TASKS), format_func=lambda t: f"{t}: {TASKS[t]}", key="ft_task",
                                 help="A CSV/TSV/JSONL of text[,text_pair],label records (classify, pairs), CoNLL-U / "
                                      "JSONL {tokens, tags} (tag), or SQuAD JSON / JSONL {question, context, answers} "
                                      "(span).")
            uploaded = c2.file_uploader("My file", type=["csv", "tsv", "jsonl", "conllu", "json"], key="ft_file",
                                        max_upload_size=Limits.upload_mb)
        c1, c0, c2, c3, c4, c5 = st.columns(6)
        budget = c1.select_slider("Training examples", budgets, 1024, key="ft_budget",
                                  format_func=lambda b: "all" if b == 0 else f"{b:,}",
                                  help="A seeded sample of the training side (the test side is whole).")
        held_budgets = [b for b in HELD_BUDGETS if not demo() or b <= 1024]
        held_budget = c0.select_slider("Held-out examples", held_budgets, 1024, key="ft_held",
                                       format_func=lambda b: "all" if b == 0 else f"{b:,}",
                                       help="Scored after every epoch: a seeded sample of the held-out side, or all of "
                                            "it (SQuAD's dev set has 10,570 questions" +
                                            ("; on this hosted demo, 1,024 of them at most)." if demo() else ")."))
        epochs = c2.number_input("Epochs", 1, 2 if demo() else 10, 1, key="ft_epochs")
        rank = held_choice("LoRA rank (0 = every weight)", [16, 8, 4, 0], key="ft_rank", container=c3)
        lr = c4.select_slider("Learning rate", RATES, 5e-4, key="ft_lr",
                              help="About 5e-5 for every weight (BERT's), 5e-4 to 1e-3 for LoRA.")
        seq_len = held_choice("Tokens per input", [64, 128, 256, 384], "ft_seq", 128, container=c5,
                              help="Longer inputs are cut (and counted): a tweet fits in 64, a news article does not. "
                                   "A question's context is cut into windows of this size instead (SQuAD: 384).")
        w1, w2 = st.columns(2)
        weights = w1.toggle("Weigh classes by inverse frequency", key="ft_weights")
        by_length = w2.toggle("Batch inputs of like length", key="ft_by_length",
                              help="Less padding, so faster where lengths vary (sentences, questions); a batch is then "
                                   "no random draw but a run of like lengths (transformers' group_by_length).")
        start = st.form_submit_button(f"Fine-tune {name}", type="primary", disabled=running)
    return FtForm(data_name, file_task, uploaded, int(budget), int(held_budget), int(epochs), int(rank), float(lr),
                  int(seq_len), bool(weights), bool(by_length), start)


def start_run(form: FtForm, lm, name: str) -> None:
    """The run checked, its data read, and the job started in the background."""
    with page_errors(stop=False):
        if form.data_name == "file":
            if form.uploaded is None:
                raise BertScopeError("Upload a file first (or choose a shipped corpus).")
            check_upload(form.uploaded)
            task, source = form.file_task, str(keep_upload(form.uploaded))
        else:
            task, source = {TAG: "tag", SPAN: "span"}.get(SHIPPED[form.data_name], "classify"), form.data_name
        cfg = FinetuneConfig(task=task, seq_len=min(form.seq_len, lm.max_length), lora_rank=form.rank,
                             epochs=form.epochs, lr=form.lr, batch_size=32, max_examples=form.budget or None,
                             max_held_out=form.held_budget or (1024 if demo() and task == "span" else None),
                             class_weights=form.weights and task != "span", group_by_length=form.by_length)
        cfg.check()
        data = load_task_data(task, source, held_out=cfg.held_out, seed=cfg.seed)
        # "bundled-on-sentiment-…": a run never takes a shipped model's name (bundled-sentiment)
        out = run_folder(name, f"on-{form.data_name}")
        data.check()
        st.session_state[JOB] = start_training("fine-tuning run", out, lm, lambda done: (
            TrainingJob.start_finetune(name, data, out, cfg, on_done=done)))
        st.rerun()



def cut_words(cut: dict, seq_len: int) -> str:
    """How many inputs were longer than the model was shown, in words."""
    if not cut["train"] and not cut["held_out"]:
        return f"none longer than {seq_len} tokens"
    return f"{cut['train']:,} training and {cut['held_out']:,} held-out records cut at {seq_len} tokens"


def epoch_row(e: dict) -> dict:
    held = scores_from_json(e["held_out"])
    scores = {"held-out exact match": held.exact_match, "held-out F1": held.f1} if isinstance(held, SpanScores) else \
        {"held-out accuracy": held.accuracy, "held-out macro-F1": held.macro_f1}
    return {"epoch": e["epoch"], "train loss": e["train_loss"], "held-out loss": held.loss, **scores,
            "tokens/s": e["tokens_per_s"]}


def live_view(job: TrainingJob) -> None:
    """The run's loss as it moves, its epochs' held-out scores, and Stop."""
    live_run(job, ("ft_shown", "ft_stop", "ft_loss"),
             ("Stop", "Stops between steps; the last finished epoch stays in the run's checkpoint, and the same run started "
                      "again goes on from there."), "loading, tokenising and scoring the held-out side before training",
             lambda snap: {"task loss (cross-entropy)": snap.losses} if snap.losses else {},
             lambda snap: [epoch_row(e) for e in snap.epochs],
             {"train loss": st.column_config.NumberColumn(format="%.3f"),
              "held-out loss": st.column_config.NumberColumn(format="%.3f"),
              "held-out accuracy": st.column_config.NumberColumn(format="percent"),
              "held-out macro-F1": st.column_config.NumberColumn(format="%.3f"),
              "held-out exact match": st.column_config.NumberColumn(format="percent"),
              "held-out F1": st.column_config.NumberColumn(format="percent"),
              "tokens/s": st.column_config.NumberColumn(format="%,.0f")})


def span_results(m) -> None:
    """A finished answer-span run: exact match and F1 against the untrained head, the windows, the worst answers."""
    before, after = m.before, m.after
    tiles = st.columns(3)
    tiles[0].metric("Held-out exact match", f"{after.exact_match:.1%}", f"{after.exact_match - before.exact_match:+.1%}",
                    help=f"SQuAD's official scoring over {after.questions:,} held-out questions; the change is "
                         "from the untrained head.")
    tiles[1].metric("Held-out F1", f"{after.f1:.1%}", f"{after.f1 - before.f1:+.1%}")
    tiles[2].metric("Windows", f"{after.windows:,}", help="Contexts longer than a window are cut into "
                                                        "overlapping windows; a question's answer is the best "
                                                        "span over all of its windows.")
    several, long = m.spans.several_windows, m.spans.too_long
    st.caption(plain(f"{m.train_examples:,} training and {m.held_out_examples:,} held-out questions "
                     f"({m.split}); windows of {m.config['seq_len']} tokens overlapping by {m.spans.doc_stride}: "
                     f"{several['train']:,} training and {several['held_out']:,} held-out questions needed more "
                     f"than one" + (f"; {sum(long.values()):,} left no room for their context (no window: "
                                    "unanswered)" if sum(long.values()) else "")
                     + f". {m.trainable_parameters:,} weights trained."))
    if m.worst:
        st.subheader("Held-out questions answered worst")
        st.dataframe(pd.DataFrame([{"question": w["question"], "gold": " | ".join(w["gold"]) or "(no answer)",
                                    "predicted": w["predicted"] or "(no answer)", "F1": w["f1"]}
                                   for w in m.worst]), hide_index=True, width="stretch",
                     column_config={"F1": st.column_config.NumberColumn(format="%.2f")})


def class_results(m) -> None:
    """A finished classifier or tagger: accuracy and macro-F1, the confusion, each label, the least likely examples."""
    before, after = m.before, m.after
    unit = after.unit
    tiles = st.columns(3)
    tiles[0].metric("Held-out accuracy", f"{after.accuracy:.1%}", f"{after.accuracy - before.accuracy:+.1%}",
                    help=f"Over {after.count:,} held-out {unit}; the change is from the untrained head.")
    tiles[1].metric("Held-out macro-F1", f"{after.macro_f1:.3f}", f"{after.macro_f1 - before.macro_f1:+.3f}")
    if m.test is not None:
        tiles[2].metric(f"Test accuracy ({m.test.name})", f"{m.test.accuracy:.1%}",
                        help=f"{m.test.count:,} {unit}, scored once at the end.")
    st.caption(plain(f"{m.train_examples:,} training and {m.held_out_examples:,} held-out {unit}; "
                     f"{m.split}; {cut_words(m.truncated, m.config['seq_len'])}. "
                     f"{m.trainable_parameters:,} weights trained."))
    st.plotly_chart(confusion_heatmap({"labels": after.labels, "confusion": after.confusion, "records": after.count}),
                    config=PLOT_CONFIG, width="stretch", key="ft_confusion")
    st.dataframe(pd.DataFrame([{"label": label, **v} for label, v in after.per_label.items()]), hide_index=True,
                 width="stretch", column_config={c: st.column_config.NumberColumn(format="%.3f")
                                                 for c in ("precision", "recall", "f1")})
    if m.worst:
        st.subheader("Held-out examples the model finds least likely")
        rows = [{"text": " ".join(w["words"]) if "words" in w else w["text"],
                 "gold": " ".join(w["gold"]) if isinstance(w["gold"], list) else w["gold"],
                 "predicted": " ".join(w["predicted"]) if isinstance(w["predicted"], list) else w["predicted"],
                 "log p(gold)": w["log_p_gold"]} for w in m.worst]
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch",
                     column_config={"log p(gold)": st.column_config.NumberColumn(format="%.2f")})


def page() -> None:
    if st.session_state.pop("ft_go", False):  # the finished model was opened: show its decisions
        st.switch_page(page_record("predictions.py").path)
    st.title("Fine-tuning")
    st.caption("BERT's second stage (Devlin et al. 2019, §4): a new layer over [CLS] for classification and pairs, "
               "over every word's first piece for tagging, a start and an end vector over the context for answer "
               "spans (SQuAD), the whole model trained end to end (BERT's own recipe: "
               "batch 32, learning rate 5e-5, a few epochs) or LoRA adapters with the head in full. The same run "
               "headless: `python -m bertscope finetune MODEL --task classify --data sentiment --out runs/NAME`.")
    feature_based_or_fine_tuned()
    training_gate("finetune", "; bundled-sentiment and bundled-upos are fine-tuned models you can open in the sidebar",
                  "Pick a model in the sidebar first: the encoder to fine-tune.")
    name = chosen_model_name()
    lm = require_model()

    job: TrainingJob | None = st.session_state.get(JOB)
    form = ft_form(name, job is not None and job.snapshot().status == "running")
    if form.start:
        start_run(form, lm, name)
    job = st.session_state.get(JOB)
    if job is None:
        st.info("Choose the data and a budget, then fine-tune: the run goes on in the background while you use the "
                "other pages, and this page shows its loss and held-out accuracy as they move.")
        st.stop()
    live_view(job)
    snap = job.snapshot()
    m = snap.metrics  # a FinetuneMetrics once the run is done
    if m is not None and isinstance(m.after, SpanScores):
        span_results(m)
    elif m is not None:
        class_results(m)
    if snap.metrics:
        folder = f"{snap.out}/model"
        st.caption(plain(f"The fine-tuned model (LoRA merged) is in {folder}" if not demo() else "The run is finished."))
        if not demo():
            st.button("Open it on the Predictions page", key="ft_use", type="primary",
                      on_click=lambda: (open_in_sidebar(folder), st.session_state.update(ft_go=True)))


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
