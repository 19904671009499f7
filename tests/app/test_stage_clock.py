"""The time left that every long job's bar shows comes from this run on this machine, never a constant."""

from bertscope.app.kit.results import StageClock


def test_time_left_is_measured_per_stage():
    now = [0.0]
    clock = StageClock(lambda: now[0])
    assert clock.left("Hidden states", 0, 100) is None  # the stage's first report starts its clock
    now[0] = 0.5
    assert clock.left("Hidden states", 5, 100) is None  # under a second measured: nothing said yet
    now[0] = 10.0
    assert clock.left("Hidden states", 10, 100) == "about 90 s left"  # 1 s a step, 90 steps to go
    now[0] = 20.0
    assert clock.left("Hidden states", 100, 100) is None  # done
    assert clock.left("Probes", 1, 14) is None  # a new stage: its own clock, from its first report
    now[0] = 80.0
    assert clock.left("Probes", 4, 14) == "about 3 min left"  # 20 s a fit, 10 fits to go
