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


def replay(costs, at_share: float):
    """A scripted stage whose step k costs ``costs[k]`` seconds: the clock's answer when ``at_share`` of the
    steps are done, and the true time left then."""
    now = [0.0]
    clock = StageClock(lambda: now[0])
    total = len(costs)
    clock.estimate("pass", 0, total)
    said = None
    for k, cost in enumerate(costs, 1):
        now[0] += cost
        said = clock.estimate("pass", k, total)
        if k == int(total * at_share):
            return said, sum(costs[k:]), clock.left("pass", k, total)
    return said, 0.0, None


def test_steps_that_grow_dearer_get_a_range_that_holds_the_truth():
    """Sentences run shortest first, so each step costs more than the last (the UDHR view said "about 30 s
    left" at 192 of 780 and took 77 s more). At 10% done the range holds the true time left, where the mean
    rate so far was several times too low."""
    costs = [0.05 * (1 + k / 50) for k in range(780)]  # step k: 0.05 s, growing linearly with length
    (low, high), truth, text = replay(costs, 0.10)
    k = 78
    mean_rate_guess = sum(costs[:k]) / k * (780 - k)  # what the clock said before
    assert truth / mean_rate_guess > 3  # the old estimate's error
    assert low <= truth * 1.05 and truth <= high * 1.05  # the range holds it
    assert text.endswith(" left") and " to " in text  # said as a range: the cost is still moving


def test_steps_that_cost_alike_get_one_figure():
    costs = [0.2 + 0.02 * ((k * 7919) % 11) / 10 for k in range(300)]  # about 0.2 s each, a little noise
    (low, high), truth, text = replay(costs, 0.10)
    assert abs(high - truth) / truth < 0.15 and abs(low - truth) / truth < 0.15
    assert text.startswith("about ") and " to " not in text
