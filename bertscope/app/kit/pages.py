"""Every page of the app, one record each: ``app.py`` routes to them, the home page lists them, the browser
tests open them, and ``model_picker.require_model`` gates each by what its record says it needs of the
sidebar's model (after LIT's input and output specs: a page declares, the app decides). Adding a page is
its script in ``bertscope/app/`` and one ``Page`` record here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertscope.core.task_head import SEQUENCE, SPANS, TOKEN
from bertscope.sources.presets import BUNDLED_MLM, BUNDLED_SENTIMENT, BUNDLED_UPOS, PRESETS

APP_DIR = Path(__file__).resolve().parents[1]  # bertscope/app: the page scripts


@dataclass(frozen=True)
class Need:
    """Something a page needs of the loaded model; unmet, the page says so in one line and offers these
    bundled models (offline, one click), and the rest of the app goes on as before."""

    what: str  # "masked-LM head", as the line names it ("… has no masked-LM head")
    met: Callable[[Any], bool]  # LoadedModel -> whether it has it
    offer: tuple[str, ...]  # bundled models that have it (offered with a button)
    presets: tuple[str, ...] = ()  # other presets that have it (named: loadable here, or needing the hub)


NEEDS: dict[str, Need] = {
    "masked-lm": Need("masked-LM head", lambda lm: "mlm" in lm.outputs, (BUNDLED_MLM,),
                      tuple(n for n, p in PRESETS.items() if "mlm" in p.outputs)),
    "task-head": Need("task head (a fine-tuned classifier, tagger or question-answering model)",
                      lambda lm: lm.task is not None, (BUNDLED_SENTIMENT, BUNDLED_UPOS)),
    "masked-lm-or-classifier": Need(
        "masked-LM head or sequence classifier",
        lambda lm: "mlm" in lm.outputs or (lm.task is not None and lm.task.kind == SEQUENCE),
        (BUNDLED_MLM, BUNDLED_SENTIMENT), tuple(n for n, p in PRESETS.items() if "mlm" in p.outputs)),
    "a-decision": Need(
        "masked-LM head, sequence classifier, tagger or question-answering head",
        lambda lm: "mlm" in lm.outputs or (lm.task is not None and lm.task.kind in (SEQUENCE, TOKEN, SPANS)),
        (BUNDLED_MLM, BUNDLED_SENTIMENT, BUNDLED_UPOS), tuple(n for n, p in PRESETS.items() if "mlm" in p.outputs)),
}


@dataclass(frozen=True)
class Page:
    script: str  # NAME.py in bertscope/app/, run by st.navigation
    title: str
    icon: str  # Streamlit's :material/NAME: icon, in the navigation and on the home page
    shows: str = ""  # what the page shows (Markdown), for the home page
    try_first: str = ""  # what to try first there (Markdown)
    default: bool = False  # the page at the root URL
    loads_model: bool = True  # False: the page reads configs only (Parameters), never the sidebar's weights
    needs: tuple[str, ...] = ()  # keys of NEEDS the sidebar's model must meet

    def unmet(self, lm: Any) -> list[Need]:
        """What ``lm`` lacks of this page's needs (in the record's order)."""
        return [NEEDS[n] for n in self.needs if not NEEDS[n].met(lm)]

    def needs_in_words(self) -> str:
        """"needs a masked-LM head", for the home page; "" when it needs nothing in particular."""
        return "needs " + " and ".join("a " + NEEDS[n].what for n in self.needs) if self.needs else ""

    @property
    def path(self) -> Path:
        """The page's script, wherever the package is installed (``streamlit run`` takes it by path)."""
        return APP_DIR / self.script

    @property
    def url_path(self) -> str:
        """Where the page lives under the app's address (Streamlit names it after the script)."""
        return "" if self.default else self.script.removesuffix(".py")


PAGES: tuple[Page, ...] = (
    Page("home.py", "Home", ":material/home:", default=True),
    Page("attention.py", "Attention", ":material/visibility:",
         "every head of every layer as heatmaps, bertviz, head statistics over a corpus, and what raw weights "
         "miss: rollout, flow, norm-based attention, ALTI.",
         "the default sentence, layer 2: which heads resolve *it*?"),
    Page("masked.py", "Masked tokens", ":material/masks:",
         "fill-mask with several masks, BERT's 80/10/10 recipe, the head read at every layer, NSP, and why a "
         "prediction was made (integrated gradients).",
         "*He wrote a [MASK] to his mother.* on bundled-mlm (it says *letter*, 47%), then *Why this "
         "prediction?*; and one it gets instructively wrong: *Paris is the capital of [MASK].* (it copies "
         "*paris* from the sentence, 82%: a small masked-LM leans on words it can see).", needs=("masked-lm",)),
    Page("predictions.py", "Predictions", ":material/label:",
         "what a fine-tuned model decides: every label's probability for a text or a pair, each word's tag and "
         "the entities, the answer to a question in its context; a labelled file's accuracy, macro-F1 and "
         "confusion matrix.",
         "*bundled-sentiment* in the sidebar (fine-tuned here on tweets) with a tweet of yours, then *Why this "
         "decision?*; *bundled-upos* tags every word; or a fine-tuned checkpoint of yours (a folder transformers' "
         "Trainer saved).", needs=("task-head",)),
    Page("shift.py", "Embedding shift", ":material/explore:",
         "one word in many contexts, layer by layer: do the senses of *bank* separate?",
         "the shipped *bank* sentences; watch the gap between senses grow with depth."),
    Page("align.py", "Cross-lingual", ":material/translate:",
         "translations in one space: maps coloured by language, retrieval per layer, token alignment.",
         "the shipped sentences on bundled-multilingual; compare raw and mean-centred retrieval."),
    Page("similarity.py", "Similarity & search", ":material/join_inner:",
         "why an embedding model finds two texts similar: every token pair's share of the score (integrated "
         "Jacobians), each text's tokens' totals, and the model's own embedding settings (pooling, normalisation, "
         "prompts) read from its folder; a corpus searched, each hit explained; a reranker's order explained.",
         "bundled (the genuine all-MiniLM-L6-v2) with the page's query and passage: *bank* ~ *bank* and *account* ~ "
         "*account* carry most of it, *open* ~ *create* and *new* follow."),
    Page("params.py", "Parameters", ":material/calculate:",
         "exact parameter counts for any config without downloading weights, memory, FLOPs, a timeline.",
         "bert-large-uncased with its pretraining heads.", loads_model=False),
    Page("probes.py", "Probes", ":material/troubleshoot:",
         "linear probes per layer with control tasks, on shipped suites, the Brown corpus or your file; the "
         "Syntax tab: Hewitt & Manning's structural probe on UD English-EWT (trees from the vectors, your own "
         "sentence's tree), and UPOS and dependency-label probes on the same treebank.",
         "*brown-pos*: real text, where the probe beats its control task by a wide margin (selectivity about "
         "0.4 on bundled); then the template suite *pos*, where task and control both score near 100%: why "
         "control tasks matter."),
    Page("interventions.py", "Interventions", ":material/science:",
         "test a claim by changing the model: remove heads, rank heads by importance with a pruning curve, "
         "patch activations from a clean run into a corrupted one, switch an SAE feature off or steer with it.",
         "*Patching* with the subject–verb example on bundled-mlm (*The men at the table [MASK] tired.*): the "
         "subject's number sits on *men* up to layer 2 and moves to the mask at layer 3 (75% of the difference "
         "recovered there), past the singular *table* in between.", needs=("masked-lm-or-classifier",)),
    Page("circuits.py", "Circuits", ":material/account_tree:",
         "which paths through the model carry a decision: every edge between heads, feed-forwards and the decision "
         "scored by EAP or EAP-IG, the circuit drawn layer by layer, and its faithfulness curve beside random "
         "circuits (MIB's CPR and CMD) on held-out pairs; or one decision's attribution graph of transcoder features.",
         "*gender* on bundled-mlm with EAP-IG: about 1% of the edges carry 80% of the decision, head 5.8 writing "
         "*she*/*he* into the mask; random circuits of the same size carry nothing.", needs=("a-decision",)),
    Page("features.py", "Features", ":material/scatter_plot:",
         "dictionary features: a sparse autoencoder's features on each word of a text, one feature's top contexts "
         "over Brown with its gold-tag label (precision and recall), the words it promotes, its histogram; search "
         "by tag or by word.",
         "bundled-mlm, layer 2: type a sentence with *should* in it, open the feature that fires there, then *Index "
         "the corpus* to see its contexts and its label."),
    Page("faithfulness.py", "Faithfulness", ":material/fact_check:",
         "which attribution to trust on this model: every method's token ranking put to a deletion test on the"
         " model's own predictions, with intervals and a random floor.",
         "*Run the test* on 25 Brown sentences on bundled-mlm: integrated gradients and ALTI come out most "
         "faithful, attention, rollout and norm between them and the random floor; then open the item where "
         "they disagree most.", needs=("masked-lm-or-classifier",)),
    Page("compare.py", "Compare", ":material/compare:",
         "two models side by side: linear CKA between every pair of layers over Brown words, and both models' "
         "predictions on one text.",
         "bundled-mlm against bundled: what the shipped masked-LM training moved, layer by layer (little below"
         " layer 3, the top layer most: CKA about 0.26)."),
    Page("pretrain.py", "Pretraining", ":material/model_training:",
         "BERT's masked-LM recipe run on the sidebar's model with the Brown corpus, live loss, before and "
         "after.",
         "*bundled* in the sidebar (no masked-LM head yet) with the page's defaults (*news*, 256 chunks, one "
         "epoch at 1e-3; 40 s on a quiet 2-core CPU, up to 3 min beside another job): the held-out loss falls from "
         "10.8 to 7.2; then its fill-mask. (*bundled-mlm* was "
         "trained on Brown already: more Brown barely moves it, and the page says so.)"),
    Page("finetune.py", "Fine-tuning", ":material/tune:",
         "BERT's second stage on the sidebar's encoder: a task head trained on tweets, news topics, parts of "
         "speech or your file, with live curves, held-out accuracy, macro-F1 and a confusion matrix; the finished "
         "model opens on the Predictions page.",
         "bundled on the tweets, 1,024 examples, one epoch of LoRA: then *Open it on the Predictions page*."),
)


def page(script: str) -> Page:
    """The record of the page whose script is ``script`` ("attention.py"): what a cross-page link or
    ``switch_page`` takes (its ``path`` works in the checkout and in the installed app alike; a path string
    relative to the checkout does not: the installed app's main script lives in the launch folder)."""
    for entry in PAGES:
        if entry.script == script:
            return entry
    raise KeyError(f"no page {script!r}; the pages are {', '.join(p.script for p in PAGES)}")

