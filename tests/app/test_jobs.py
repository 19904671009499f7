"""The one rule for long jobs (``kit.jobs``, the newcomer's row 8): a job runs in its own thread keyed by its
parameters, survives its tab (its watching script interrupted), is found again by whoever asks the same while it runs,
ends by Stop only when nobody else watches it, and frees its budget slot only when its thread ends."""

from __future__ import annotations

import threading

import pytest

from bertscope.app.kit.jobs import Jobs, Stopped


def _held_work(release: threading.Event, steps: list):
    def work(progress):
        for i in range(1_000):
            steps.append(i)
            progress(i, 1_000, "Steps")
            if release.wait(0.01):
                return "the result"
        raise AssertionError("never released")
    return work


def test_a_job_goes_on_when_its_watcher_leaves_and_its_result_is_handed_on():
    jobs, release, steps, ended = Jobs(), threading.Event(), [], []
    job = jobs.start(("probes", "key"), "Probe run", _held_work(release, steps), ended.append)
    job.watch()
    job.leave()  # the tab closed: its script was interrupted while it watched
    assert jobs.find(("probes", "key")) is job and not job.done.is_set()  # whoever asks the same finds it running
    release.set()
    assert job.done.wait(10) and job.result == "the result" and job.error is None
    assert ended == [job] and jobs.find(("probes", "key")) is None  # its end handed on (stored), then it leaves


def test_stop_ends_a_job_only_when_nobody_else_watches_it():
    jobs, release, steps = Jobs(), threading.Event(), []
    job = jobs.start("k", "Probe run", _held_work(release, steps), lambda ended: None)
    job.watch()
    job.watch()  # a second session asked for the same
    job.leave()  # the first pressed Stop: its run left first, then the callback
    assert not job.stop_unless_watched()  # the other still watches: it goes on
    job.leave()
    assert job.stop_unless_watched()
    assert job.done.wait(10) and isinstance(job.error, Stopped) and "Nothing of it was kept" in str(job.error)
    release.set()


def test_the_slot_is_released_when_the_thread_ends_not_when_the_page_does():
    from bertscope.app.kit.budget import CostBudget

    budget, jobs, release, steps = CostBudget(), Jobs(), threading.Event(), []
    slot = budget.start("v", "probe run", "k", 5, 2, now=0.0)
    job = jobs.start("k", "Probe run", _held_work(release, steps), lambda ended: slot.release())
    job.watch()
    job.leave()  # the page is gone
    assert budget.running == 1
    release.set()
    job.done.wait(10)
    assert budget.running == 0


@pytest.mark.parametrize("failure", [ValueError("a bug"), KeyboardInterrupt()])
def test_what_the_work_raises_is_handed_to_the_watcher(failure):
    jobs = Jobs()

    def work(progress):
        raise failure

    job = jobs.start("k", "x", work, lambda ended: None)
    assert job.done.wait(10) and job.error is failure


def test_the_cost_before_the_press_is_the_last_whole_runs_rate_scaled(monkeypatch, tmp_path):
    """The newcomer's rows 9 and 15: a structural probe run said nothing of its cost until it had run 8 minutes."""
    from bertscope.app.kit.estimates import expected, record

    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path))
    assert expected("structural", "bundled", 600, "sentences").startswith("not measured on this server yet")
    record("structural", "bundled", 600, 41.0)
    assert expected("structural", "bundled", 1_300, "sentences") == \
        "about 89 s here (the last such run took 41 s for 600 sentences)"
    assert expected("structural", "bert-base-uncased", 600, "sentences").startswith("not measured")  # per model


def _stopped_script(optional: bool) -> None:
    import streamlit as st

    from bertscope.app.kit.chrome import page_ends
    from bertscope.app.kit.results import result_store, stop_mark

    key = ("a stopped job", optional)
    st.session_state.setdefault("_stopped_jobs", set()).add(stop_mark("stopped_test", key))

    def work(progress):
        raise AssertionError("a stopped job started again")

    st.query_params["flag"] = "1"
    with page_ends():  # as the router runs a page
        found = None
        try:
            found = result_store("stopped_test").compute(key, work, "Reading, rows", costly=None, optional=optional)
        finally:  # a page's own finally: what it writes reaches the address before the page ends
            if found is None:
                st.query_params.pop("flag", None)
        st.write(f"after the job: {found}")


@pytest.mark.parametrize("optional", [True, False])
def test_a_stopped_job_stays_stopped_and_only_an_optional_one_lets_the_page_go_on(optional):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_stopped_script, args=(optional,)).run(timeout=30)
    assert not at.exception
    assert any("Stopped (reading)" in i.value for i in at.info)
    assert [b.label for b in at.button] == ["Run it again"]
    assert [m.value for m in at.markdown if m.value.startswith("after the job")] == (
        ["after the job: None"] if optional else [])
    assert "flag" not in at.query_params  # written in the finally, also when the page ended on the stopped job


def _refused_script() -> None:
    import streamlit as st

    from bertscope.app.kit import results
    from bertscope.app.kit.budget import BudgetRefused

    def refuse(*_args, **_kwargs):
        raise BudgetRefused("This demo runs 5 costly jobs per visitor in 10 minutes.")

    kept, results.charge = results.charge, refuse
    try:
        found = results.result_store("refused_test").compute(
            ("refused",), lambda progress: "ran", "Reading, rows", costly="feature examples", optional=True)
    finally:
        results.charge = kept
    st.write(f"after the job: {found}")


def test_an_optional_job_the_budget_refuses_is_one_line_and_the_page_goes_on():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_refused_script).run(timeout=30)
    assert not at.exception
    assert [e.value for e in at.error] == ["This demo runs 5 costly jobs per visitor in 10 minutes\\."]  # Markdown-escaped
    assert [m.value for m in at.markdown if m.value.startswith("after the job")] == ["after the job: None"]
