"""The line Compare and the Question map give a run of several agents' traces."""

from __future__ import annotations

from app.dashboard.components.agents import agents_line


def test_a_run_of_one_agent_or_none_gets_no_line() -> None:
    assert agents_line("solo", ()) is None
    assert agents_line("solo", ("solver",)) is None


def test_many_agents_are_named_up_to_four_and_counted() -> None:
    line = agents_line("league", [f"player{n}" for n in range(6)])
    assert line is not None
    assert line.startswith(
        'league holds the traces of 6 trained agents ("player0", "player1", "player2", '
        '"player3" and 2 more):'
    )
