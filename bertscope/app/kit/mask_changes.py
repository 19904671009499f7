"""Each mask's top predictions before and after an intervention (heads removed, a feature switched
off or steered), side by side, and what became of the intact model's top prediction."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from bertscope.app.kit.chrome import plain


def show_mask_changes(masks, after: str) -> None:
    """``after``: what was done, as a column title ("heads removed")."""
    for m in masks:
        st.markdown(f"**Mask at token {m.position}**")
        before = {p.token: p.score for p in m.before}
        top = m.before[0]
        after_of_top = next((p.score for p in m.after if p.token == top.token), None)
        c1, c2 = st.columns(2)
        c1.dataframe(pd.DataFrame([{"intact": p.token.strip(), "p": p.score} for p in m.before]),
                     hide_index=True, width="stretch")
        c2.dataframe(pd.DataFrame([{after: p.token.strip(), "p": p.score,
                                    "was": f"{before[p.token]:.4f}" if p.token in before
                                    else f"below the top {len(m.before)}"} for p in m.after]),
                     hide_index=True, width="stretch",
                     column_config={"was": st.column_config.TextColumn(help="p in the intact model")})
        st.caption(plain(f"The intact model's top prediction, “{top.token.strip()}”: p {top.score:.3f} → "
                         + (f"{after_of_top:.3f}" if after_of_top is not None else f"out of the top {len(m.after)}")
                         + f" with the {after}."))
