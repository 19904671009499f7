"""Home: the front door. What each page shows and what to try first, which models can be used
right now, where the headless tools are, and the card of the loaded model."""

import streamlit as st

from bertscope.app.kit.chrome import plain
from bertscope.app.kit.limits import demo
from bertscope.app.kit.model_picker import fallback_notice, model_options, obtainable, require_model
from bertscope.app.kit.pages import PAGES
from bertscope.cli import COMMANDS
from bertscope.core.card import model_card, outputs_text
from bertscope.sources.bundled import BUNDLED_MODELS
from bertscope.sources.presets import PRESETS


def page_list() -> None:
    """Each page: its link, what it shows, what to try first and what it needs (from its record)."""
    for entry in PAGES:
        if entry.default:
            continue  # this page
        left, right = st.columns([1, 4], vertical_alignment="center")
        left.page_link(entry.path, label=entry.title, icon=entry.icon)
        words = entry.needs_in_words()
        needs = f" *({words[0].upper()}{words[1:]}.)*" if words else ""  # from the page's record
        right.markdown(f"{entry.shows} **Try:** {entry.try_first}{needs}")


def models_here() -> None:
    """The presets, those that load here now first."""
    st.subheader("Models you can use right now")
    rows = []
    for name in model_options():
        preset = PRESETS.get(name)
        if preset is None:
            continue
        usable = obtainable(name)
        rows.append({"model": name, "usable now": "yes" if usable else "no: not cached, hub unreachable",
                     "pretraining outputs": outputs_text(list(preset.outputs)), "what it is": preset.description, "_usable": usable})
    rows.sort(key=lambda row: not row.pop("_usable"))  # the ones that work here first; the order of the list otherwise
    st.table(rows, hide_index=True)  # every row and every word shown: no inner scroll, no cut-off column
    st.caption(f"Offline, the {len(BUNDLED_MODELS)} bundled models always work (three of them fine-tuned here: "
               "bundled-sentiment, bundled-upos and bundled-reranker); any other Hugging Face encoder works once it "
               "is in the local cache (`hf download bert-base-uncased`) or the hub can be reached. "
               "Pick one in the sidebar, or type a hub id or a local folder.")


def headless() -> None:
    """The commands, for a local user (a hosted demo's visitors have no shell on it)."""
    if not demo():
        st.subheader("Headless")
        st.markdown("Everything on these pages runs from a shell too (docs/commands.md lists them all): "
                    f"`bertscope COMMAND` (or `python -m bertscope COMMAND`) with {len(COMMANDS)} commands, "
                    "`bertscope probe` / `bertscope probe-sweep` for probe runs among them.")
        with st.expander(f"Every command ({len(COMMANDS)})"):
            st.markdown("\n".join(f"- `{c.name}`: {c.help}" for c in COMMANDS.values()))
        st.caption("For example: which words make bundled-mlm put “river” at the [MASK] (integrated gradients, "
                   "a score per token, as JSON with --json):")
        st.code('bertscope attribute bundled-mlm "The bank of the [MASK] was muddy." --method ig --target 5:river',
                language="bash")


def model_card_view(lm) -> None:
    """The loaded model's card: where it came from, its size, its outputs and head, its notes."""
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
            "": ["Architecture", "Pretraining outputs", "Task head", "Max tokens", "Parameters (exact)", "Device", "Precision"],
            "value": [
                f"{card['architecture']} ({card['model_type']})",
                outputs_text(card["outputs_present"]),
                card["task"]["description"] if card["task"] else "none (not a fine-tuned checkpoint)",
                str(card["max_length"]),
                f"{card['parameters']:,} (encoder {card['encoder_parameters']:,})",
                card["device"],
                card["dtype"],
            ],
        }
    )
    for note in card["notes"]:
        st.info(plain(note))


def page() -> None:
    st.title("BertScope")
    st.markdown("Look inside BERT-family encoders on real checkpoints and real text. Start with a page:")
    notice = fallback_notice()
    if notice:
        st.warning(notice)
    page_list()
    models_here()
    headless()
    model_card_view(require_model())


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
