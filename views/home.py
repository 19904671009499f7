"""Home: what BertScope is, and the card of the loaded model."""

import streamlit as st

from bertscope.card import heads_text, model_card
from views.shared import demo, fallback_notice, plain, require_model

st.title("BertScope")
st.markdown(
    "Look inside BERT-family encoders: attention heads, masked-token predictions, "
    "contextual embedding shifts, cross-lingual alignment, parameter breakdowns and "
    "linear probes, on real checkpoints. Pick a model in the sidebar."
)

notice = fallback_notice()
if notice:
    st.warning(notice)

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
