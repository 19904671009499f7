"""A page's inputs live in its URL, so a copied link reproduces the view."""

from __future__ import annotations

import streamlit as st
from streamlit.errors import StreamlitAPIException

from bertscope.app.kit.chrome import plain
from bertscope.app.kit.limits import TRUTHY
from bertscope.core.layers import hidden_index, hidden_name, layer_title
from bertscope.errors import BertScopeError


def to_bool(value: str) -> bool:
    if value.lower() in TRUTHY | {"0", "false", "no", "off"}:
        return value.lower() in TRUTHY
    raise ValueError(value)


def from_url(param: str, key: str, convert=str, valid=None) -> None:
    """Once per session, before the widget ``key`` is drawn: take its value from ?param=."""
    restored = st.session_state.setdefault("_from_url", set())
    if key in restored:
        return
    restored.add(key)
    if param not in st.query_params:
        return
    raw = st.query_params[param]
    try:
        value = convert(raw)
        ok = valid is None or valid(value)
    except (TypeError, ValueError):
        ok = False
    if ok:
        st.session_state[key] = value
    else:
        st.warning(plain(f"Ignored the link's {param}={raw[:40]}: not a valid value here."))


def to_url(**params) -> None:
    """Write the page's current inputs into the URL (None leaves a parameter out). What changes is written at once:
    each write is an entry in the browser's history (Back), so several parameters, set or taken out, go in one."""
    changed, gone = {}, []
    for name, value in params.items():
        if value is None or value == "":
            if name in st.query_params:
                gone.append(name)
        else:
            text = str(int(value)) if isinstance(value, bool) else str(value)
            if st.query_params.get(name) != text:
                changed[name] = text
    if not gone:
        if changed:
            st.query_params.update(changed)
        return
    kept = {k: st.query_params.get_all(k) for k in st.query_params if k not in gone}
    try:
        st.query_params.from_dict({**kept, **changed})  # one write
    except StreamlitAPIException:  # a parameter bound to a widget (bind="query-params") is set by the widget only
        for name in gone:
            st.query_params.pop(name)
        if changed:
            st.query_params.update(changed)


NUMBERING = "v"  # links carry v=2: layer=embeddings or a block number (core.layers)


def from_url_layer(key: str, n_layers: int, param: str = "layer") -> None:
    """Once per session, before the widget ``key`` (an index into the hidden states: 0 = the
    embeddings, l = block l - 1's output) is drawn: take it from ?layer=. A link with v=2 names a
    layer as every page does (``embeddings`` or a block from 0); a link without it was made when
    these pages counted hidden states (0 = embeddings, 1 = the first block): translated to the
    same hidden state, with a notice, never silently shifted."""
    restored = st.session_state.setdefault("_from_url", set())
    if key in restored:
        return
    restored.add(key)
    if param not in st.query_params:
        return
    raw = st.query_params[param]
    try:
        if st.query_params.get(NUMBERING) == "2" or not raw.strip().isdigit():
            index = hidden_index(raw, n_layers)
        else:
            index = int(raw)
            if not 0 <= index <= n_layers:
                raise BertScopeError(raw)
            st.info(plain(f"This link numbers layers the old way (0 = the embeddings): its {param}={raw} is "
                          f"{layer_title(index)} now that every page counts encoder blocks from 0."))
        st.session_state[key] = index
    except BertScopeError:
        st.warning(plain(f"Ignored the link's {param}={raw[:40]}: not a valid layer here."))


def layer_in_url(index: int) -> dict[str, str]:
    """What ``to_url`` writes for a hidden-state layer: its name and the numbering's version."""
    return {"layer": hidden_name(index), NUMBERING: "2"}


def tab_from_url(key: str, names: list[str], param: str | None = None) -> None:
    """Before ``st.tabs(names, key=key)``: a link's ?{param}=NAME opens that tab (once per session; a page link
    within the session counts when the address had no tab before; a tab the page wrote itself, ``link_flag``, never
    does); a name the page has no tab for is ignored with the usual one-line notice."""
    param = param or key
    restored = st.session_state.setdefault("_from_url", set())
    if key in restored or param not in st.query_params:
        return
    restored.add(key)
    raw = st.query_params[param]
    if raw in names:
        st.session_state[key] = raw
    else:
        st.warning(plain(f"Ignored the link's {param}={raw[:40]}: this page's tabs are {', '.join(names)}."))
        st.query_params.pop(param, None)


def arrival() -> dict[str, str]:
    """The address's settings when this session began (the router reads them on its first run, before any page
    writes its own into the address): whether a page was opened by a shared link."""
    return st.session_state.setdefault("_arrival", {k: st.query_params[k] for k in st.query_params})


def link_flag(flag: str, shown: bool, tab: tuple[str, str], **also) -> None:
    """A tab's link flag (``flag=1``) in the address only while its result is on screen, with the tab that shows it
    (``tab``: the tabs' parameter and this tab's name; a tab picked is not in the address by itself), so a link copied
    then opens that tab and runs its request once (``link_asks``), and a reload of a tab that showed nothing runs
    nothing. Without the result, the flag goes, and the tab with it when the address names this one. ``also``: other
    parameters written in the same write (``to_url``)."""
    param, name = tab
    if shown:
        st.session_state.setdefault("_from_url", set()).add(param)  # the tabs' key: not a link's tab to open later
        to_url(**also, **{flag: "1", param: name})
    else:
        to_url(**also, **{flag: None}, **({param: None} if st.query_params.get(param) == name else {}))


SPENT = "_links_spent"


def spend_links() -> None:
    """A page that stops before it draws what a link asked for (its model or model B cannot be loaded, its word is
    empty): the link's requests not yet made are spent, so none runs later, unasked, on settings the visitor picked
    since (another model, another B) and charged to the demo's budget."""
    st.session_state[SPENT] = True


def link_asks(name: str, linked: bool, request) -> bool:
    """Whether a shared link asks for ``request`` now. A page opened by a link (its settings in the address on
    ``arrival``: ``linked``) runs the link's own request once, as the person who sent it saw it; every other request,
    and the same one again (after a Stop, say), waits for its button. Called on every render, so the first call
    records the link's request (a flag that stayed set ran every later request unasked: a model switched in the
    sidebar, a tab opened later)."""
    seen = f"_link_{name}"
    if seen not in st.session_state:
        st.session_state[seen] = (request,) if linked and not st.session_state.get(SPENT) else None
    if st.session_state[seen] != (request,):
        return False
    st.session_state[seen] = None  # used: the job starts now, and a rerun watches it or finds its result
    return True
