"""The hosted demo's one cost budget (``views.kit.budget``): enforced where every costly job starts
(``ResultStore.compute``), per visitor as the server sees them, surviving a reload, with a cap on
jobs at once; each refusal one line that says when the next run is possible."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from bertscope.app.kit.budget import WINDOW_S, BudgetRefused, CostBudget, client_address
from tests.app.kit import APP, texts

ROOT = Path(__file__).resolve().parents[2]


def test_five_jobs_per_visitor_then_one_line_saying_when():
    budget = CostBudget()
    for i in range(5):
        budget.start("1.2.3.4", "patching run", ("job", i), 5, None, now=100.0 + i).release()
    with pytest.raises(BudgetRefused, match=r"^This demo runs 5 costly jobs per visitor in 10 minutes; the next "
                                            r"patching run is possible in 9 min 55 s\.$"):
        budget.start("1.2.3.4", "patching run", ("job", 5), 5, None, now=105.0)
    budget.start("5.6.7.8", "patching run", ("job", 5), 5, None, now=105.0)  # another visitor is not affected
    assert budget.start("1.2.3.4", "patching run", ("job", 6), 5, None, now=100.0 + WINDOW_S)  # the window moved


def test_variants_of_one_job_are_charged_once_and_work_done_is_never_refunded():
    budget = CostBudget()
    budget.start("v", "UMAP map", ("vectors", "UMAP"), 2, None, grouped=True, now=0.0).release()
    for layer in range(12):  # every notch of the layer slider: the same map job
        budget.start("v", "UMAP map", ("vectors", "UMAP"), 2, None, grouped=True, now=1.0 + layer).release()
    assert budget.spent("v", now=13.0) == 1
    slot = budget.start("v", "probe run", "a", 2, None, now=20.0)
    slot.release()  # the job failed, was stopped, or its tab closed: it ran, so it stays charged
    slot.release()  # a job's end and its page's cleanup may both release: once counts
    assert budget.running == 0 and budget.spent("v", now=21.0) == 2
    with pytest.raises(BudgetRefused):
        budget.start("v", "probe run", "b", 2, None, now=21.0)
    assert budget.running == 0  # a refusal takes no slot


def test_a_visitor_is_forgotten_when_its_last_charge_leaves_the_window():
    budget = CostBudget()
    for i in range(50):
        budget.start(f"10.0.0.{i}", "probe run", i, 5, None, now=float(i)).release()
    assert len(budget.charges) == 50
    budget.start("10.0.1.1", "probe run", "x", 5, None, now=48.5 + WINDOW_S).release()
    assert set(budget.charges) == {"10.0.1.1", "10.0.0.49"}  # only charges still in the window are kept


def test_a_server_wide_cap_on_jobs_running_at_once():
    budget = CostBudget()
    first = budget.start("a", "head-importance run", 1, 5, 2, now=0.0)
    budget.start("b", "head-importance run", 2, 5, 2, now=0.0)
    with pytest.raises(BudgetRefused, match="running 2 costly jobs for its visitors; try the probe run again"):
        budget.start("c", "probe run", 3, 5, 2, now=0.0)
    first.release()
    budget.start("c", "probe run", 3, 5, 2, now=0.0)


@pytest.mark.parametrize(("header", "values", "proxies", "client"), [
    ("X-Forwarded-For", ["203.0.113.7"], 1, "203.0.113.7"),  # the proxy appended the client's address
    ("X-Forwarded-For", ["6.6.6.6, 203.0.113.7"], 1, "203.0.113.7"),  # the client wrote 6.6.6.6 itself
    ("X-Forwarded-For", ["6.6.6.6", "203.0.113.7"], 1, "203.0.113.7"),  # two header lines: in order
    ("X-Forwarded-For", ["6.6.6.6, 203.0.113.7, 10.0.0.2"], 2, "203.0.113.7"),  # a CDN, then nginx
    ("X-Forwarded-For", ["203.0.113.7"], 2, None),  # fewer entries than trusted proxies: not believed
    ("X-Forwarded-For", [], 1, None),
    ("X-Real-IP", ["203.0.113.7"], 1, "203.0.113.7"),  # a header the proxy sets whole
])
def test_the_client_is_the_trusted_proxys_entry_never_the_leftmost(header, values, proxies, client):
    assert client_address(header, values, proxies) == client


def test_fifty_spoofed_forwarded_for_values_are_one_visitor(monkeypatch):
    """The audit's row: one client sent 50 X-Forwarded-For values of its own and ran 50 jobs on a budget of 5.
    Behind one proxy the entry that counts is the one the proxy appended: the same for all fifty."""
    monkeypatch.setenv("BERTSCOPE_VISITOR_HEADER", "X-Forwarded-For")
    budget, ran = CostBudget(), 0
    for i in range(50):
        who = client_address("X-Forwarded-For", [f"198.51.100.{i}, 203.0.113.7"], 1)
        try:
            budget.start(who, "probe run", i, 5, None, now=float(i)).release()
            ran += 1
        except BudgetRefused:
            pass
    assert ran == 5


def _compute_calls() -> list[tuple[str, int, ast.Call]]:
    calls = []
    for path in sorted((ROOT / "bertscope" / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compute":
                calls.append((path.relative_to(ROOT).as_posix(), node.lineno, node))
    return calls


# jobs that cost about a view, each with its reason
CHEAP = {
    "bertscope/app/shift.py": "the word's vectors in the sentences given (a few short passes) and a PCA map",
    "bertscope/app/align.py": "a PCA map of vectors already computed",
    "bertscope/app/sections/graph_tab.py": "one feature of a traced graph switched off: two passes of a sentence",
}


def test_every_slow_job_of_every_page_names_its_cost():
    """Every page's slow jobs start in ``ResultStore.compute``, which takes ``costly=`` with no
    default: this lists them and checks each says what it costs on the budget."""
    calls = _compute_calls()
    assert len(calls) >= 19
    pages = {path for path, _, _ in calls}
    assert {"bertscope/app/attention.py", "bertscope/app/compare.py", "bertscope/app/faithfulness.py", "bertscope/app/interventions.py",
            "bertscope/app/masked.py", "bertscope/app/probes.py", "bertscope/app/shift.py", "bertscope/app/align.py"} <= pages
    for path, line, call in calls:
        if path == "bertscope/app/kit/results.py":
            continue
        costly = next((k.value for k in call.keywords if k.arg == "costly"), None)
        assert costly is not None, f"{path}:{line}: a job without costly="
        if isinstance(costly, ast.Constant) and costly.value is None:
            assert path in CHEAP, f"{path}:{line}: costly=None needs a reason in CHEAP"


# candidates whose clean and corrupted logit differences differ on the tiny random model (by > 5e-4)
PAIRS = [("steep", "water"), ("bad", "water"), ("good", "water"), ("big", "water"), ("water", "dog"),
         ("steep", "cat"), ("small", "water")]


def _patching_page(monkeypatch, model: str) -> AppTest:
    monkeypatch.setenv("BERTSCOPE_DEMO", "1")
    monkeypatch.setenv("BERTSCOPE_ALLOWLIST", model)
    monkeypatch.setenv("BERTSCOPE_MODEL", model)
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.switch_page("bertscope/app/interventions.py").run()
    at.session_state["int_tab"] = "Patching"
    return at.run()


def _patch(at: AppTest, a: str, b: str) -> AppTest:
    at.text_input(key="int_clean").input("the river was [MASK] and the river .")
    at.text_input(key="int_corrupt").input("the money was [MASK] and the money .")
    at.text_input(key="int_a").input(a)
    at.text_input(key="int_b").input(b)
    next(x for x in at.button if x.label == "Patch" and "int_patch_form" in x.id).click()
    return at.run()


def test_the_sixth_costly_job_is_refused_also_after_a_reload_and_the_last_result_stays(monkeypatch, tiny_mlm_dir):
    at = _patching_page(monkeypatch, str(tiny_mlm_dir))
    for a, b in PAIRS[:5]:
        at = _patch(at, a, b)
        assert not at.exception and not at.error, texts(at.error)
    at = _patch(at, *PAIRS[5])
    assert not at.exception
    (error,) = texts(at.error)
    assert error.startswith("This demo runs 5 costly jobs per visitor in 10 minutes; the next patching run is "
                            "possible in") and "\n" not in error
    assert "Corrupted" in {m.label for m in at.metric}  # the last result is still on screen
    assert any("your last result" in c for c in texts(at.caption))
    again = _patching_page(monkeypatch, str(tiny_mlm_dir))  # a reload: a new browser session, the same visitor
    again = _patch(again, *PAIRS[6])
    assert any("the next patching run is possible in" in e for e in texts(again.error))
    again = _patch(again, *PAIRS[0])  # computed before: served from the cache, free
    assert not again.error and "Corrupted" in {m.label for m in again.metric}


def test_every_text_box_shows_its_cap_before_the_button():
    """Every text box of every page has ``max_chars`` (Streamlit shows the count and the cap as one
    types, and stops typing past it), read from the demo's limits."""
    boxes = []
    for path in sorted((ROOT / "bertscope" / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("text_area", "text_input"):
                cap = next((k.value for k in node.keywords if k.arg == "max_chars"), None)
                boxes.append((path.name, node.lineno, ast.unparse(cap) if cap is not None else None))
    assert len(boxes) >= 20
    uncapped = [b for b in boxes if b[2] is None or not b[2].startswith("Limits.")]
    assert not uncapped, uncapped
