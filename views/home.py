"""Home: the front door. What each page shows and what to try first, which models can be used
right now, where the headless tools are, and the card of the loaded model."""

import streamlit as st

from bertscope.core.card import heads_text, model_card
from bertscope.sources.presets import PRESETS
from views.kit.chrome import plain
from views.kit.limits import demo
from views.kit.models import fallback_notice, model_options, obtainable, require_model

# (page script, label, icon, what it shows, what to try first)
PAGES = [
    ("views/attention.py", "Attention", ":material/visibility:",
     "every head of every layer as heatmaps, bertviz, head statistics over a corpus, and what raw "
     "weights miss: rollout, flow, norm-based attention, ALTI.",
     "the default sentence, layer 2: which heads resolve *it*?"),
    ("views/masked.py", "Masked tokens", ":material/masks:",
     "fill-mask with several masks, BERT's 80/10/10 recipe, the head read at every layer, NSP, and "
     "why a prediction was made (integrated gradients).",
     "*He wrote a [MASK] to his mother.* on bundled-mlm (it says *letter*, 47%), then *Why this prediction?*; "
     "and one it gets instructively wrong: *Paris is the capital of [MASK].* (it copies *paris* from the "
     "sentence, 82%: a small masked-LM leans on words it can see)."),
    ("views/shift.py", "Embedding shift", ":material/explore:",
     "one word in many contexts, layer by layer: do the senses of *bank* separate?",
     "the shipped *bank* sentences; watch the gap between senses grow with depth."),
    ("views/align.py", "Cross-lingual", ":material/translate:",
     "translations in one space: maps coloured by language, retrieval per layer, token alignment.",
     "the shipped sentences on bundled-multilingual; compare raw and mean-centred retrieval."),
    ("views/params.py", "Parameters", ":material/calculate:",
     "exact parameter counts for any config without downloading weights, memory, FLOPs, a timeline.",
     "bert-large-uncased with its pretraining heads."),
    ("views/probes.py", "Probes", ":material/troubleshoot:",
     "linear probes per layer with control tasks, on shipped suites, the Brown corpus or your file.",
     "*brown-pos*: real text, where the probe beats its control task by a wide margin (selectivity about 0.4 "
     "on bundled); then the template suite *pos*, where task and control both score near 100%: why control "
     "tasks matter."),
    ("views/interventions.py", "Interventions", ":material/science:",
     "test a claim by changing the model: remove heads, rank heads by importance with a pruning curve, "
     "patch activations from a clean run into a corrupted one.",
     "*Patching* with the subject–verb example on bundled-mlm: the subject's number sits on *keys* in the "
     "lower layers and reaches the mask around layers 3-4."),
    ("views/faithfulness.py", "Faithfulness", ":material/fact_check:",
     "which attribution to trust on this model: every method's token ranking put to an erasure test on the "
     "model's own predictions, with intervals and a random floor.",
     "*Run the test* on 25 Brown sentences on bundled-mlm: integrated gradients and ALTI come out most faithful, "
     "attention, rollout and norm between them and the random floor; then open the item where they disagree most."),
    ("views/compare.py", "Compare", ":material/compare:",
     "two models side by side: linear CKA between every pair of layers over Brown words, and both models' "
     "predictions on one text.",
     "bundled-mlm against bundled: what the shipped masked-LM training moved, layer by layer (little below layer 3, "
     "the top layer most: CKA about 0.26)."),
    ("views/pretrain.py", "Pretraining", ":material/model_training:",
     "BERT's masked-LM recipe run on the sidebar's model with the Brown corpus, live loss, before and after.",
     "bundled with the *news* genre, 256 chunks, one epoch; then its fill-mask."),
]

st.title("BertScope")
st.markdown("Look inside BERT-family encoders on real checkpoints and real text. Start with a page:")

notice = fallback_notice()
if notice:
    st.warning(notice)

for path, name, icon, shows, first in PAGES:
    left, right = st.columns([1, 4], vertical_alignment="center")
    left.page_link(path, label=name, icon=icon)
    right.markdown(f"{shows} **Try:** {first}")

st.subheader("Models you can use right now")
rows = []
for name in model_options():
    preset = PRESETS.get(name)
    if preset is None:
        continue
    usable = obtainable(name)
    rows.append({"model": name, "usable now": "yes" if usable else "no: not cached, hub unreachable",
                 "heads": heads_text(list(preset.heads)), "what it is": preset.description, "_usable": usable})
rows.sort(key=lambda row: not row.pop("_usable"))  # the ones that work here first; the order of the list otherwise
st.table(rows, hide_index=True)  # every row and every word shown: no inner scroll, no cut-off column
st.caption("Offline, the three bundled models always work; any other Hugging Face encoder works once it "
           "is in the local cache (`hf download bert-base-uncased`) or the hub can be reached. "
           "Pick one in the sidebar, or type a hub id or a local folder.")

if not demo():
    st.subheader("Headless")
    st.markdown("Everything on these pages runs from a shell too (documented in the README, "
                "*Command line*): `python -m bertscope COMMAND` for info, inspect, attention, head-stats, "
                "fill-mask, mlm-recipe, nsp, sop, shift, corpus-search, align, probe, params, attribute, "
                "faithfulness, compare, ablate, head-importance and patch; "
                "`python -m probes.layerwise` and `probes.sweep` for probe runs; "
                "`python -m bertscope pretrain` for BERT's masked-LM recipe.")
    st.code('python -m bertscope attribute bundled-mlm "The bank of the [MASK] was muddy." --method ig --target 5:river',
            language="bash")

lm = require_model()
card = model_card(lm)

st.header(plain(f"Model: {card['model']}"))
if demo():  # a hosted demo does not show the server's file paths
    st.caption(plain(f"Bundled copy of {card['origin']}" if card["origin"] else card["model"]))
elif card["origin"]:
    st.caption(plain(f"Bundled copy of {card['origin']}, loaded from {card['source']}"))
else:
    revision = f" @ {card['revision'][:10]}" if card["revision"] else ""
    st.caption(plain(f"Loaded from {card['source']}{revision}"))

cols = st.columns(5)
cols[0].metric("Layers", card["layers"])
cols[1].metric("Heads per layer", card["heads"])
cols[2].metric("Hidden size", card["hidden_size"])
cols[3].metric("Vocabulary", f"{card['vocab_size']:,}")
cols[4].metric("Parameters", f"{card['parameters'] / 1e6:.1f} M", help=f"{card['parameters']:,} as loaded")

st.table(
    {
        "": ["Architecture", "Heads present", "Max tokens", "Parameters (exact)", "Device", "Precision"],
        "value": [
            f"{card['architecture']} ({card['model_type']})",
            heads_text(card["heads_present"]),
            str(card["max_length"]),
            f"{card['parameters']:,} (encoder {card['encoder_parameters']:,})",
            card["device"],
            card["dtype"],
        ],
    }
)
for note in card["notes"]:
    st.info(plain(note))
