"""The Training page's numbers: long runs averaged into points, what each point drew, the
trend, and the steps a question is shown at."""

from __future__ import annotations

import dataclasses
import math

import plotly.graph_objects as go
import pytest

from app.dashboard.training import charts
from app.dashboard.training.curves import (
    adds_to_reward,
    curves_of,
    named_reward_points,
    shown_steps,
    step_ranges,
    steps_of_points,
    trend,
    trend_window,
)
from storage.training import DrawnQuestion, NamedRewardStep, TrainingStep

ACCURACY = next(c for c in charts.CHARTS if c.title == "Accuracy")
REWARD = next(c for c in charts.CHARTS if c.title == "Reward")


def test_shown_steps_are_first_middle_last() -> None:
    assert shown_steps([0, 3, 5, 9, 12]) == [0, 5, 12]
    assert shown_steps([4, 7]) == [4, 7]
    assert shown_steps([]) == []


def _step(n: int, *, episodes: int, accuracy: float, logprob: float | None) -> TrainingStep:
    return TrainingStep(
        train_step=n, episodes=episodes, groups=episodes // 2, accuracy=accuracy, reward=accuracy,
        reward_std=0.5, group_reward_std=0.1 * n, frac_reward_zero_std=1.0 if n % 2 else 0.0,
        unparsed_rate=None, mean_steps=2.0, mean_logprob=logprob, mean_tokens=10.0,
    )  # fmt: skip


def test_a_long_run_is_drawn_as_means_of_consecutive_steps() -> None:
    # 2,500 steps, at most 1,000 points: runs of 3 steps, each averaged into one point at
    # its last step, weighted by episodes (by groups for the group metrics).
    steps = [
        _step(n, episodes=2 + 2 * (n % 3), accuracy=float(n % 3 == 2), logprob=-1.0)
        if n % 3 == 0
        else _step(n, episodes=2 + 2 * (n % 3), accuracy=float(n % 3 == 2), logprob=None)
        for n in range(2500)
    ]
    curves = curves_of(steps, max_points=1000)
    assert (curves.steps, curves.per_point, len(curves.points)) == (2500, 3, 834)
    assert curves.last == steps[-1]
    first = curves.points[0]  # steps 0, 1, 2 with 2, 4 and 6 episodes
    assert (first.train_step, first.episodes, first.groups) == (2, 12, 6)
    assert first.accuracy == 6 / 12  # only step 2 is right: its 6 episodes of 12
    assert first.frac_reward_zero_std == 2 / 6  # step 1's 2 groups of 6
    assert first.group_reward_std == (0.0 * 1 + 0.1 * 2 + 0.2 * 3) / 6
    assert first.mean_logprob == -1.0  # step 0 alone has one
    assert first.unparsed_rate is None  # no step has one
    assert curves.firsts[:3] == [0, 3, 6]
    assert (curves.points[-1].train_step, curves.firsts[-1]) == (2499, 2499)  # a run of one
    [trace, trended] = charts.figure(curves, ACCURACY).data
    assert len(trace.x) == 834 and trace.mode == "lines"
    assert trace.customdata[0][0] == "steps 0-2 (mean)"
    assert "%{customdata[0]}" in trace.hovertemplate
    assert trended.name == "trend (mean of 83 points)"


def test_a_range_dragged_across_a_chart_is_its_points_steps_whole() -> None:
    steps = [_step(n, episodes=2, accuracy=0.5, logprob=None) for n in range(0, 3000, 2)]
    curves = curves_of(steps, max_points=1000)  # points of two steps: 0-2 at 2, 4-6 at 6, ...
    assert curves.per_point == 2
    assert steps_of_points(curves, 5.2, 13.9) == (4, 10)  # the points at 6 and 10
    assert steps_of_points(curves, 13.9, 5.2) == (4, 10)  # dragged right to left
    assert steps_of_points(curves, -50, 2) == (0, 2)
    assert steps_of_points(curves, 2995, 9000) == (2996, 2998)  # past the last point
    assert steps_of_points(curves, 6.5, 9.5) is None  # between two points
    assert steps_of_points(curves_of([]), 0, 10) is None


def test_a_short_run_is_drawn_step_by_step() -> None:
    steps = [_step(n, episodes=4, accuracy=0.5, logprob=-1.0) for n in range(12)]
    curves = curves_of(steps)
    assert curves.per_point == 1 and curves.points == steps
    [trace, trended] = charts.figure(curves, ACCURACY).data
    # Raw points as markers with the trend as their line; hovers in words, not (x, y) tuples.
    assert trace.mode == "markers" and trended.mode == "lines"
    assert trace.hovertemplate.startswith("accuracy %{y:.1%}<br>%{customdata[0]}")
    assert list(trace.customdata[0][:2]) == ["step 0", 4]


def test_the_trend_is_a_trailing_mean_weighted_by_episodes() -> None:
    assert trend([1.0, 0.0, None, 1.0], [1, 3, 2, 1], 2) == [1.0, 0.25, 0.0, 1.0]
    assert trend([None], [1], 3) == [None]
    assert (trend_window(2), trend_window(16), trend_window(1000)) == (2, 3, 100)


def test_a_flat_quantity_is_drawn_flat_not_zoomed_into_its_last_digits() -> None:
    mean = 0.9428571428571428  # 33 of 35 episodes right at each step
    assert trend([mean] * 3, [7, 7, 7], 3) == [mean] * 3  # equal values: exactly that value
    # The same rewards at each step, their means a rounding apart (summed in another order).
    steps = [
        dataclasses.replace(_step(n, episodes=35, accuracy=0.5, logprob=None), reward=r)
        for n, r in enumerate([mean, 0.9428571428571427, mean])
    ]
    fig = charts.figure(curves_of(steps), REWARD)
    low, high = fig.layout.yaxis.range
    assert low < mean < high and high - low >= 0.1
    # Rewards that differ are left to the chart's own range.
    steps[1] = dataclasses.replace(steps[1], reward=0.5)
    assert charts.figure(curves_of(steps), REWARD).layout.yaxis.range is None


def test_a_change_of_a_ten_thousandth_is_not_drawn_as_a_fall_down_the_whole_chart() -> None:
    # Two reward functions summed (format 1.0, execution 0 or 1): a step's mean 1.3332 among
    # steps of 1.3334 is noise, and the chart's own range would span just those two.
    steps = [
        dataclasses.replace(_step(n, episodes=5120, accuracy=0.5, logprob=None), reward=r)
        for n, r in enumerate([1.3334, 1.3334, 1.3332, 1.3334])
    ]
    low, high = charts.figure(curves_of(steps), REWARD).layout.yaxis.range
    assert low < 1.3332 < 1.3334 < high
    assert high - low == pytest.approx(0.13334)
    # A change a user would see is drawn over the chart's own range.
    steps[3] = dataclasses.replace(steps[3], reward=1.5)
    assert charts.figure(curves_of(steps), REWARD).layout.yaxis.range is None


def test_each_point_says_what_its_steps_drew_and_where_their_signal_came_from() -> None:
    steps = [_step(n, episodes=8, accuracy=0.5, logprob=None) for n in range(4)]
    steps[0] = dataclasses.replace(
        steps[0],
        drawn=(DrawnQuestion("q-b", 2, 4), DrawnQuestion("q-a", 0, 4)),
        by_source={"correctness": 1, "shaping only": 1, "none": 0},
    )
    steps[1] = dataclasses.replace(steps[1], drawn=(DrawnQuestion("q-a", 1, 4),))
    steps[3] = dataclasses.replace(
        steps[3],
        drawn=tuple(DrawnQuestion(f"q{i}", 1, 1) for i in range(8)),
        by_source={"correctness": 0, "shaping only": 0, "none": 8},
    )
    curves = curves_of(steps, max_points=2)  # points of two steps
    # A question drawn at both steps of a point is counted over both.
    assert curves.drawn[0] == "q-a 1/8 correct, q-b 2/4"
    assert curves.drawn[1] == "q0 1/1 correct, q1 1/1, q2 1/1, q3 1/1, q4 1/1, q5 1/1 and 2 more"
    assert curves.sources[0] == {"correctness": 1, "shaping only": 1, "none": 0}
    assert curves.sources[1] == {"correctness": 0, "shaping only": 0, "none": 8}
    # In a hover, three questions a line: on one, the box grew wider than the chart.
    [trace] = charts.figure(curves, ACCURACY).data  # two points: no trend
    assert trace.customdata[1][2] == (
        "<br>drew q0 1/1 correct, q1 1/1, q2 1/1,<br>q3 1/1, q4 1/1, q5 1/1 and 2 more"
    )
    # A point a step: each its own.
    assert curves_of(steps).drawn[:3] == ["q-a 0/4 correct, q-b 2/4", "q-a 1/4 correct", ""]


def test_steps_logged_every_tenth_get_a_tick_each_and_no_trend_of_two() -> None:
    # TRL logs completions every `logging_steps`: steps 10 and 20 were drawn with 11 ticks
    # between them, bars 10 steps wide, and a "trend" of the two points themselves.
    steps = [_step(n, episodes=8, accuracy=0.5, logprob=None) for n in (10, 20)]
    fig = charts.figure(curves_of(steps), ACCURACY)
    assert [t.name for t in fig.data] == ["accuracy"]
    assert fig.data[0].mode == "lines+markers"
    assert (fig.layout.xaxis.tick0, fig.layout.xaxis.dtick) == (10, 10)
    signal = charts.signal_figure(curves_of(steps))
    assert (signal.layout.xaxis.tick0, signal.layout.xaxis.dtick) == (10, 10)
    # Consecutive steps keep a tick each; a long run keeps plotly's own.
    short = charts.figure(curves_of([_step(n, episodes=8, accuracy=0.5, logprob=None)
                                     for n in range(5)]), ACCURACY)  # fmt: skip
    assert (short.layout.xaxis.tick0, short.layout.xaxis.dtick) == (0, 1)
    assert [t.name for t in short.data] == ["accuracy", "trend (mean of 3 points)"]
    long = charts.figure(curves_of([_step(n, episodes=8, accuracy=0.5, logprob=None)
                                    for n in range(0, 400, 10)]), ACCURACY)  # fmt: skip
    assert long.layout.xaxis.dtick is None


def test_a_long_runs_signal_bars_touch_and_a_short_runs_keep_their_gaps() -> None:
    # A gap between 200 bars is under a pixel: it drew as stray white lines across the stack.
    def signal(steps: int) -> go.Figure:
        return charts.signal_figure(
            curves_of([_step(n, episodes=8, accuracy=0.5, logprob=None) for n in range(steps)])
        )

    short, long = signal(48), signal(196)
    assert {t.type for t in (*short.data, *long.data)} == {"bar"}
    assert (short.layout.bargap, long.layout.bargap) == (0.1, 0)


@pytest.mark.parametrize(
    ("steps", "said"),
    [((3,), "3"), ((3, 4, 5, 8), "3–5, 8"), ((1, 3, 5), "1, 3, 5"), ((7, 8), "7–8"), ((), "")],
)
def test_the_steps_a_page_leaves_out_read_as_ranges(steps: tuple[int, ...], said: str) -> None:
    assert step_ranges(steps) == said


def test_named_rewards_are_averaged_into_the_same_points_as_the_curves() -> None:
    # Six steps, at most three points: steps (0, 1), (2, 3), (4, 5), each point the mean over
    # its steps weighted by the episodes that carry the reward; step 3 has no "format".
    steps = [_step(n, episodes=4, accuracy=0.5, logprob=None) for n in range(6)]
    curves = curves_of(steps, max_points=3)
    named = [
        NamedRewardStep(0, "correct", 1.0, 4), NamedRewardStep(0, "format", 4.0, 4),
        NamedRewardStep(1, "correct", 3.0, 4), NamedRewardStep(1, "format", 2.0, 2),
        NamedRewardStep(2, "correct", 0.0, 4), NamedRewardStep(2, "format", 1.0, 4),
        NamedRewardStep(3, "correct", 2.0, 4),
        NamedRewardStep(5, "correct", 4.0, 4),
        NamedRewardStep(6, "correct", 4.0, 4),  # a step the curves do not hold yet
    ]  # fmt: skip
    means = named_reward_points(curves, named)
    assert means == {"correct": [0.5, 0.25, 1.0], "format": [1.0, 0.25, None]}
    assert adds_to_reward(curves, means)


def test_one_named_reward_that_is_the_episode_reward_adds_nothing() -> None:
    steps = [_step(n, episodes=2, accuracy=0.5 * (n % 2), logprob=None) for n in range(4)]
    curves = curves_of(steps)
    same = {"score": [p.reward for p in curves.points]}
    assert not adds_to_reward(curves, same)
    assert adds_to_reward(curves, {"score": [0.0, 0.5, 0.0, 0.4]})
    assert adds_to_reward(curves, {"score": [0.0, 0.5, 0.0, None]})  # a step not scored yet
    assert not adds_to_reward(curves, {})


def test_points_that_are_not_finite_numbers_are_named_and_left_out_of_the_trend() -> None:
    steps = [_step(n, episodes=2, accuracy=0.5, logprob=None) for n in range(9)]
    steps[2] = dataclasses.replace(steps[2], reward=math.inf)
    steps[3] = dataclasses.replace(steps[3], reward=-math.inf)
    steps[6] = dataclasses.replace(steps[6], reward=math.inf)
    each = curves_of(steps)
    note = charts.undrawn_note(each, charts.series_values(each, REWARD))
    assert (
        note
        == "Not drawn, as not a finite number: reward inf at steps 2, 6; reward -inf at step 3."
    )
    # Averaged three steps a point, the points' spans are named.
    averaged = curves_of(steps, max_points=3)
    assert charts.undrawn_note(averaged, charts.series_values(averaged, REWARD)) == (
        "Not drawn, as not a finite number: reward inf at the points of steps 0–2, 6–8; "
        "reward -inf at the point of steps 3–5."
    )
    assert charts.undrawn_note(each, charts.series_values(each, ACCURACY)) == ""
    assert trend([1.0, math.inf, 3.0, -math.inf], [1, 1, 1, 1], 3) == [1.0, 1.0, 2.0, 3.0]
