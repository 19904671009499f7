"""Parameters: exact counts by component from the config alone, memory, FLOPs, comparisons."""

import pandas as pd
import streamlit as st

from bertscope import BertScopeError
from bertscope.analysis.params import count_parameters, flops_per_token, inspect_activation_bytes, weight_bytes
from bertscope.analysis.timeline import milestones
from bertscope.app.kit.chrome import download, page_errors, plain, show_error
from bertscope.app.kit.model_picker import chosen_model_name
from bertscope.app.kit.url import from_url, to_url
from bertscope.figures.params import breakdown_treemap, compare_bars, flops_area, per_layer_bars, timeline_scatter
from bertscope.sources.presets import PRESETS


def compact(count: int) -> str:
    """336.2 M, 31.8 M, 1.5 k: short enough for a metric tile (the exact count is in its help)."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return str(count)


def tree_tab(rows) -> None:
    """The parameters as a treemap: groups, layers, components."""
    st.plotly_chart(breakdown_treemap(rows), width="stretch")


def layers_tab(b, rows) -> None:
    """Parameters per layer, by component."""
    layers = b.layer_totals()
    st.plotly_chart(per_layer_bars(rows), width="stretch")
    st.caption(f"{len(layers)} distinct layer(s) of weights; each holds {next(iter(layers.values()), 0):,}.")


def formulas_tab(b, rows) -> None:
    """Each component's count and the formula that gives it."""
    st.caption("V vocabulary, H hidden, I intermediate, P positions, E embedding size; "
               "each formula is written from the parameter shapes, so it equals its count.")
    st.dataframe(rows, hide_index=True, width="stretch",
                 column_config={"count": st.column_config.NumberColumn(format="localized")})
    download("Download CSV", rows.to_csv(index=False), f"{b.model.replace('/', '_')}-params.csv")


def memory_tab(b, head) -> None:
    """What the weights, gradients and optimizer state take in memory."""
    weights = weight_bytes(b.total)
    st.table(pd.DataFrame({"weights": list(weights), "MiB": [f"{v / 2**20:,.1f}" for v in weights.values()]}))
    max_len = b.dims["positions"]
    length = st.slider("Sequence length", 8, max_len, min(128, max_len))
    batch = st.slider("Batch", 1, 64, 1)
    act = inspect_activation_bytes(b, length, batch)
    st.caption("fp32 tensors one inspection pass returns (hidden states of every layer, all "
               "attention maps, MLM logits when a head is counted).")
    st.table(pd.DataFrame({"tensor": list(act), "MiB": [f"{v / 2**20:,.1f}" for v in act.values()]}))


def flops_tab(b) -> None:
    """The FLOPs of a forward pass, by component."""
    max_len = b.dims["positions"]
    lengths = sorted({8, 16, 32, 64, 128, 256, 384, max_len} | set(range(32, max_len + 1, 32)))
    flops = pd.DataFrame(
        [{"length": n, "part": part, "GFLOPs per token": v / 1e9}
         for n in lengths for part, v in flops_per_token(b, n).items()]
    )
    st.plotly_chart(flops_area(flops), width="stretch")
    st.caption("Forward pass, per token: linear = 2 × matmul weights × layers run; attention = "
               "4 × n × H × layers, quadratic in length over the sequence (Kaplan et al. 2020).")


def compare_tab(head) -> None:
    """The counts of two models side by side."""
    picked = st.multiselect(
        "Models", [p for p in PRESETS],
        default=["bert-base-uncased", "bert-large-uncased", "bert-base-multilingual-cased",
                 "distilbert-base-uncased", "albert-base-v2", "roberta-base",
                 "google/electra-base-discriminator"],
    )
    table = []
    for model in picked:
        try:
            c = count_parameters(model, head)  # the Count chosen above, for every model alike
        except BertScopeError as err:
            show_error(err)
            continue
        table.append({"model": model, "total": c.total, **c.group_totals(),
                      "layers": c.dims["layers"], "hidden": c.dims["hidden"]})
    if table:
        frame = pd.DataFrame(table)
        frame = frame.fillna(0).astype({c: "int64" for c in frame.columns if c != "model"})  # no such part: 0
        counts = [c for c in frame.columns if c not in ("model",)]
        st.dataframe(frame, hide_index=True, width="stretch",
                     column_config={c: st.column_config.NumberColumn(format="localized") for c in counts})
        st.plotly_chart(compare_bars(frame), width="stretch")
    if st.toggle("Show the timeline of BERT's story (builds GPT-3 on the meta device: seconds)"):
        story = pd.DataFrame([m.__dict__ for m in milestones()])
        st.plotly_chart(timeline_scatter(story), width="stretch")
        st.dataframe(story, hide_index=True,
                     column_config={"parameters": st.column_config.NumberColumn(format="localized"),
                                    "year": st.column_config.NumberColumn(format="%d")})


def page() -> None:
    st.title("Parameters")
    st.caption(
        "Counted exactly from the config on PyTorch's meta device: no weights are downloaded. "
        "Presets' configs ship with BertScope, so this page works offline."
    )
    name = chosen_model_name()
    head = head_choice()
    if not name:
        st.info("Type a hub id (org/name) or a local model folder in the sidebar.")
        return
    with page_errors():
        b = count_parameters(name, head)
    totals(b)
    rows = components_table(b)
    tab_tree, tab_layers, tab_formulas, tab_memory, tab_flops, tab_compare = st.tabs(
        ["Treemap", "Per layer", "Formulas", "Memory", "FLOPs", "Compare"]
    )
    with tab_tree:
        tree_tab(rows)
    with tab_layers:
        layers_tab(b, rows)
    with tab_formulas:
        formulas_tab(b, rows)
    with tab_memory:
        memory_tab(b, head)
    with tab_flops:
        flops_tab(b)
    with tab_compare:
        compare_tab(head)


def head_choice() -> str:
    """Which heads are counted with the encoder (none, the MLM head, or MLM + NSP), kept in the URL."""
    from_url("count", "params_head", str, lambda v: v in ("none", "mlm", "pretraining"))
    head = st.radio(
        "Count", ["none", "mlm", "pretraining"], horizontal=True, key="params_head",
        format_func={"none": "encoder + pooler", "mlm": "with MLM head",
                     "pretraining": "with MLM + NSP heads"}.get,
    )
    to_url(count=head if head != "none" else None)
    return head


def totals(b) -> None:
    """The total and each group's as metric tiles, the exact counts in a caption, and the breakdown's notes."""
    st.subheader(f"{plain(b.model)} — {b.architecture}")
    cols = st.columns(len(b.group_totals()) + 1)
    cols[0].metric("Total", compact(b.total), help=f"{b.total:,} parameters exactly")
    for col, (group, total) in zip(cols[1:], b.group_totals().items()):
        col.metric(group.replace("_", " "), compact(total),
                   help=f"{total:,} parameters exactly: {100 * total / b.total:.1f}% of the total")
    st.caption(plain("Exact: " + " · ".join([f"total {b.total:,}"] + [f"{g.replace('_', ' ')} {t:,}"
                                                                       for g, t in b.group_totals().items()])))
    for note in b.notes:
        st.caption(plain(note))


def components_table(b) -> pd.DataFrame:
    """One row a component: group, layer (empty outside the layers), name, count and formula."""
    return pd.DataFrame(
        [{"group": c.group, "layer": c.layer, "component": c.name,
          "count": c.count, "formula": c.formula} for c in b.components]
    ).astype({"layer": "Int64"})


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
