"""Pretraining: BERT's masked-LM recipe run here on the Brown corpus, as a background job with a
live loss curve, a cancel button, and the predictions before and after."""

import os
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from bertscope import BertScopeError
from bertscope.app.kit.chrome import page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, demo
from bertscope.app.kit.model_picker import MODEL_KEY, chosen_model_name, require_model
from bertscope.app.kit.training import live_run, open_in_sidebar, run_folder, start_training, training_gate
from bertscope.corpora.documents import brown_documents
from bertscope.runtime.families import pair_head
from bertscope.sources.presets import BUNDLED, BUNDLED_MLM
from bertscope.training.config import CLOZE, MAX_CLOZE, RecipeConfig, check_cloze
from bertscope.training.job import TrainingJob

JOB = "pretrain_job"
GENRES = ("adventure", "belles_lettres", "editorial", "fiction", "government", "hobbies", "humor", "learned",
          "lore", "mystery", "news", "religion", "reviews", "romance", "science_fiction")


PAIR_LABELS = {"none": "masked-LM only", "nsp": "+ next-sentence prediction (BERT)",
               "sop": "+ sentence-order prediction (ALBERT)"}


@dataclass(frozen=True)
class RecipeForm:
    """What the form asked for."""

    genres: list[str]
    chunks: int
    epochs: int
    rank: int
    lr: float
    pair: str
    sentences: str
    start: bool


def already_trained_notice(name: str) -> None:
    """bundled-mlm has seen Brown for 16 epochs: say so, and offer bundled instead."""
    if name != BUNDLED_MLM:  # measured: news, 256 chunks, one epoch; held-out loss 3.923 -> 3.924 at 1e-4, 3.964 at 1e-3
        return
    st.info("bundled-mlm was already trained on Brown's training documents for 16 epochs: more Brown barely "
            "moves it (one epoch on 256 news chunks at 1e-4: held-out loss 3.923 → 3.924; at 1e-3 it gets "
            "worse, 3.964). To watch the recipe teach, train bundled: the same encoder with no masked-LM head "
            "yet (one epoch on 256 news chunks at 1e-3: held-out loss 10.78 → 7.15 on 64 held-out chunks; measured at "
            "40 s on a quiet 2-core CPU, and up to 3 min beside another job).")
    st.button("Switch the sidebar to bundled", icon=":material/arrow_forward:", key="pretrain_to_bundled",
              type="primary", on_click=lambda: st.session_state.__setitem__(MODEL_KEY, BUNDLED))


def recipe_form(name: str, model_type: str, has_head: bool, running: bool) -> RecipeForm:
    """Genres, budget, LoRA rank, rate, the pair objective the family pretrained with, the cloze sentences."""
    # a new head learns from scratch at 1e-3; a trained one is continued at BERT's fine-tuning rates: the rate
    # opens at the sidebar model's own (a rate chosen for one model is not carried to the next)
    if st.session_state.get("pretrain_lr_for") != name:
        st.session_state["pretrain_lr_for"] = name
        st.session_state["pretrain_lr"] = 1e-4 if has_head else 1e-3
    pair_options = ["none"] + ([pair_head(model_type)] if pair_head(model_type) else [])
    with st.form("pretrain_form"):
        genres = st.multiselect("Brown genres (train on 90% of their documents, score on the rest)", GENRES,
                                ["news"], key="pretrain_genres")
        c1, c2, c3, c4 = st.columns(4)
        chunks = c1.number_input("Chunks to train on (of up to 128 tokens)", 8, 512 if demo() else 20_000, 256, 8,
                                 key="pretrain_chunks")
        epochs = c2.number_input("Epochs", 1, 2 if demo() else 32, 1, key="pretrain_epochs")
        rank = held_choice("LoRA rank (0 = every weight)", [16, 8, 4, 0], key="pretrain_rank", container=c3)
        lr = c4.select_slider("Learning rate", [1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3], key="pretrain_lr",
                              help="Opens on 1e-3 for a model without a masked-LM head (its new head learns from "
                                   "scratch) and 1e-4 for one with a trained head (1e-3 overshoots it).")
        pair = st.radio("Objective", pair_options, format_func=PAIR_LABELS.get, horizontal=True, key="pretrain_pair",
                        help="Sentence pairs [CLS] A [SEP] B [SEP] as BERT's create_pretraining_data: for NSP half the "
                             "B segments come from another document, for SOP half the pairs are swapped; the pair "
                             "head's loss is added to the masked-LM loss. Each family trains the head its own "
                             f"pretraining had ({model_type}: {', '.join(p.upper() for p in pair_options[1:]) or 'none'}).")
        sentences = st.text_area(f"Sentences to compare before and after (one a line, each with [MASK]; at most "
                                 f"{MAX_CLOZE})", "\n".join(CLOZE), key="pretrain_cloze", height=175,
                                 max_chars=Limits.corpus_chars)
        pointless = name == BUNDLED_MLM  # the notice above says why: the button is there, not first
        start = st.form_submit_button(f"Train {name} anyway" if pointless else f"Train {name}",
                                      type="secondary" if pointless else "primary", disabled=running)
    return RecipeForm(list(genres), int(chunks), int(epochs), int(rank), float(lr), pair, sentences, start)


def start_run(form: RecipeForm, lm, name: str) -> None:
    """The run checked, Brown's documents split, and the job started in the background."""
    with page_errors(stop=False):
        if not form.genres:
            raise BertScopeError("Choose at least one genre.")
        train_docs, held_docs = brown_documents(",".join(form.genres), seed=0)
        cfg = RecipeConfig(seq_len=min(128, lm.max_length), epochs=form.epochs, lora_rank=form.rank, lr=form.lr,
                           batch_size=16, max_chunks=form.chunks, pair_task=form.pair)  # chunks the model can take
        out = run_folder(name)
        cfg.check()
        cloze = check_cloze(form.sentences.splitlines())
        st.session_state[JOB] = start_training("pretraining run", out, lm, lambda done: TrainingJob.start(
            name, train_docs, held_docs, out, cfg, cloze_texts=cloze, on_done=done))
        st.rerun()


def live_view(job: TrainingJob) -> None:
    """The masked-LM (and pair head's) loss as it falls, each epoch's held-out scores, and Cancel."""
    pair_name = job.cfg.pair_task.upper()

    def curves(snap) -> dict[str, list[float]]:
        found = {"masked-LM (chosen positions)": snap.losses} if snap.losses else {}
        if snap.losses and snap.pair_losses:
            found[f"{pair_name} (pair head)"] = snap.pair_losses
        return found

    def epoch_rows(snap) -> list[dict]:
        return [{"epoch": e["epoch"], "train loss": e["train_loss"], "held-out loss": e["held_out"]["loss"],
                 "held-out top-1": e["held_out"]["top1"], "held-out top-5": e["held_out"]["top5"],
                 **({f"held-out {pair_name} accuracy": e["held_out"]["pair_accuracy"]}
                    if "pair_accuracy" in e["held_out"] else {}),
                 "tokens/s": e["tokens_per_s"]} for e in snap.epochs]

    live_run(job, ("pretrain_shown", "pretrain_cancel", "pretrain_loss"),
             ("Cancel", "Stops between steps; what finished epochs learned stays in the run's checkpoint."),
             "loading, building chunks and scoring the held-out set before training", curves, epoch_rows,
             {"train loss": st.column_config.NumberColumn(format="%.3f"),
              "held-out loss": st.column_config.NumberColumn(format="%.3f"),
              "tokens/s": st.column_config.NumberColumn(format="%,.0f"),
              **{c: st.column_config.NumberColumn(format="percent")
                 for c in ("held-out top-1", "held-out top-5", f"held-out {pair_name} accuracy")}})


def results(snap) -> None:
    """A finished run: held-out loss and top-k against before, memory, the cloze sentences before and after."""
    m = snap.metrics
    before, after = m["before"]["held_out"], m["after"]["held_out"]
    tiles = st.columns(4 if "pair_accuracy" in after else 3)
    tiles[0].metric("Held-out loss", f"{after['loss']:.3f}", f"{after['loss'] - before['loss']:+.3f}",
                    delta_color="inverse")
    tiles[1].metric("Held-out top-1", f"{after['top1']:.1%}", f"{after['top1'] - before['top1']:+.1%}")
    tiles[2].metric("Held-out top-5", f"{after['top5']:.1%}", f"{after['top5'] - before['top5']:+.1%}")
    if "pair_accuracy" in after:
        tiles[3].metric(f"Held-out {m['config']['pair_task'].upper()} accuracy", f"{after['pair_accuracy']:.1%}",
                        f"{after['pair_accuracy'] - before.get('pair_accuracy', 0.5):+.1%}",
                        help=f"On {after['pairs']:,} held-out pairs, half of them positive: chance is 50%.")
    memory = m.get("memory")
    if memory:
        st.caption(plain(f"Memory: {memory['activation_bytes_per_row'] / 2**20:,.0f} MiB of activations a row, "
                         f"{memory['rows_per_pass']} of the batch's {m['config']['batch_size']} rows a pass within "
                         f"a budget of {memory['budget_bytes'] / 2**20:,.0f} MiB (BERTSCOPE_TRAIN_MB)."))
    st.subheader("Predictions before and after")
    st.dataframe(pd.DataFrame([{"text": b["text"], "before": ", ".join(b["top"]), "after": ", ".join(a["top"])}
                               for b, a in zip(m["before"]["cloze"], m["after"]["cloze"])]),
                 hide_index=True, width="stretch")
    folder = os.path.join(snap.out, "model")
    st.caption(plain(f"The trained model (LoRA merged) is in {folder}" if not demo() else "The run is finished."))
    if not demo():
        st.button("Open the trained model in the sidebar", key="pretrain_use", on_click=lambda: open_in_sidebar(folder))


def page() -> None:
    st.title("Pretraining")
    st.caption("BERT's masked-LM recipe (Devlin et al. 2019, §3.1: 15% of the tokens chosen, of those 80% [MASK], "
               "10% random, 10% kept; dynamic masking as RoBERTa), continued on the sidebar's model with the Brown "
               "corpus, held-out documents scored after every epoch; optionally with sentence pairs for BERT's "
               "next-sentence head or ALBERT's sentence-order head. LoRA adapters (peft) by default. The same run "
               "headless: `python -m bertscope pretrain MODEL --corpus brown --out runs/NAME [--pair nsp]`.")
    training_gate("pretrain")
    name = chosen_model_name()
    lm = require_model()
    already_trained_notice(name)
    job: TrainingJob | None = st.session_state.get(JOB)
    form = recipe_form(name, lm.config.model_type, "mlm" in lm.outputs,
                       job is not None and job.snapshot().status == "running")
    if form.start:
        start_run(form, lm, name)
    job = st.session_state.get(JOB)
    if job is None:
        st.info("Choose the genres and a budget, then train: the run goes on in the background while you use "
                "the other pages, and this page shows its loss as it falls.")
        st.stop()
    if job.model_name != name and job.snapshot().status != "running":  # another model's finished run
        st.info(plain(f"Your last run trained {job.model_name}; its results show when it is the sidebar's model. "
                      f"Train {name} above."))
        st.stop()
    live_view(job)
    snap = job.snapshot()
    if snap.metrics:
        results(snap)


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
