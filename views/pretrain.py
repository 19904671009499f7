"""Pretraining: BERT's masked-LM recipe run here on the Brown corpus, as a background job with a
live loss curve, a cancel button, and the predictions before and after."""

import os
import uuid

import pandas as pd
import plotly.express as px
import streamlit as st

from bertscope import BertScopeError
from bertscope.pretrain import brown_documents
from bertscope.pretraining import RecipeConfig
from bertscope.training_job import TrainingJob
from bertscope.user_cache import user_cache_dir
from views.shared import (
    CUSTOM_KEY, MODEL_KEY, OTHER, PLOT_CONFIG, chosen_model_name, demo, plain, require_model, show_error,
)

JOB = "pretrain_job"
GENRES = ("adventure", "belles_lettres", "editorial", "fiction", "government", "hobbies", "humor", "learned",
          "lore", "mystery", "news", "religion", "reviews", "romance", "science_fiction")


def training_allowed() -> bool:
    """Locally always; on a hosted demo only when BERTSCOPE_ALLOW_TRAINING says so (it is costly)."""
    flag = os.environ.get("BERTSCOPE_ALLOW_TRAINING", "").strip().lower() in {"1", "true", "yes", "on"}
    return flag or not demo()


st.title("Pretraining")
st.caption("BERT's masked-LM recipe (Devlin et al. 2019, §3.1: 15% of the tokens chosen, of those 80% [MASK], "
           "10% random, 10% kept; dynamic masking as RoBERTa), continued on the sidebar's model with the Brown "
           "corpus, held-out documents scored after every epoch. LoRA adapters (peft) by default. The same run "
           "headless: `python -m bertscope.pretrain MODEL --corpus brown --out runs/NAME`.")
if not training_allowed():
    st.info("Training is switched off on this hosted demo (set BERTSCOPE_ALLOW_TRAINING=1 to allow it). "
            "Run it locally, or headless with `python -m bertscope.pretrain`.")
    st.stop()
name = chosen_model_name()
if not name:
    st.info("Pick a model in the sidebar first.")
    st.stop()

job: TrainingJob | None = st.session_state.get(JOB)
running = job is not None and job.snapshot().status == "running"
with st.form("pretrain_form"):
    genres = st.multiselect("Brown genres (train on 90% of their documents, score on the rest)", GENRES,
                            ["news"], key="pretrain_genres")
    c1, c2, c3, c4 = st.columns(4)
    chunks = c1.number_input("Chunks to train on (of up to 128 tokens)", 8, 512 if demo() else 20_000, 256, 8,
                             key="pretrain_chunks")
    epochs = c2.number_input("Epochs", 1, 2 if demo() else 32, 1, key="pretrain_epochs")
    rank = c3.selectbox("LoRA rank (0 = every weight)", [16, 8, 4, 0], key="pretrain_rank")
    lr = c4.select_slider("Learning rate", [1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3], 1e-3, key="pretrain_lr")
    start = st.form_submit_button(f"Train {name}", type="primary", disabled=running)

if start:
    try:
        if not genres:
            raise BertScopeError("Choose at least one genre.")
        train_docs, held_docs = brown_documents(",".join(genres), seed=0)
        seq_len = min(128, require_model().max_length)  # chunks no longer than the model takes
        cfg = RecipeConfig(seq_len=seq_len, epochs=int(epochs), lora_rank=int(rank), lr=float(lr), batch_size=16,
                           max_chunks=int(chunks))
        out = user_cache_dir() / "training" / f"{name.replace('/', '_')}-{uuid.uuid4().hex[:8]}"
        st.session_state[JOB] = TrainingJob.start(name, train_docs, held_docs, out, cfg)
        st.rerun()
    except BertScopeError as err:
        show_error(err)

job = st.session_state.get(JOB)
if job is None:
    st.info("Choose the genres and a budget, then train: the run goes on in the background while you use "
            "the other pages, and this page shows its loss as it falls.")
    st.stop()


@st.fragment(run_every=1.0 if job.snapshot().status == "running" else None)
def live() -> None:
    snap = job.snapshot()
    if snap.status != "running" and st.session_state.get("pretrain_shown") != snap.status:
        st.session_state["pretrain_shown"] = snap.status
        st.rerun()  # once, to draw the final state without the timer
    done = snap.step / snap.total if snap.total else 0.0
    st.progress(done, text=plain(f"{job.model_name}: step {snap.step:,} of {snap.total or '…'} · {snap.status}"))
    if snap.status == "running":
        st.button("Cancel", on_click=job.cancel, key="pretrain_cancel",
                  help="Stops between steps; what finished epochs learned stays in the run's checkpoint.")
    if snap.error:
        st.error(plain(snap.error))
    if snap.losses:
        fig = px.line(x=list(range(1, len(snap.losses) + 1)), y=snap.losses,
                      labels={"x": "step", "y": "masked-LM loss (nats, chosen positions)"},
                      title="Training loss, step by step", markers=len(snap.losses) <= 200)
        st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="pretrain_loss")
    if snap.epochs:
        st.dataframe(pd.DataFrame([{"epoch": e["epoch"], "train loss": e["train_loss"],
                                    "held-out loss": e["held_out"]["loss"], "held-out top-1": e["held_out"]["top1"],
                                    "held-out top-5": e["held_out"]["top5"], "tokens/s": e["tokens_per_s"]}
                                   for e in snap.epochs]), hide_index=True, width="stretch")


live()

snap = job.snapshot()
if snap.metrics:
    m = snap.metrics
    before, after = m["before"]["held_out"], m["after"]["held_out"]
    c1, c2, c3 = st.columns(3)
    c1.metric("Held-out loss", f"{after['loss']:.3f}", f"{after['loss'] - before['loss']:+.3f}", delta_color="inverse")
    c2.metric("Held-out top-1", f"{after['top1']:.1%}", f"{after['top1'] - before['top1']:+.1%}")
    c3.metric("Held-out top-5", f"{after['top5']:.1%}", f"{after['top5'] - before['top5']:+.1%}")
    st.subheader("Predictions before and after")
    st.dataframe(pd.DataFrame([{"text": b["text"], "before": ", ".join(b["top"]), "after": ", ".join(a["top"])}
                               for b, a in zip(m["before"]["cloze"], m["after"]["cloze"])]),
                 hide_index=True, width="stretch")
    folder = os.path.join(snap.out, "model")
    st.caption(plain(f"The trained model (LoRA merged) is in {folder}" if not demo() else "The run is finished."))
    if not demo():
        st.button("Open the trained model in the sidebar", key="pretrain_use", on_click=lambda: st.session_state.update(
            {MODEL_KEY: OTHER, CUSTOM_KEY: folder}))
