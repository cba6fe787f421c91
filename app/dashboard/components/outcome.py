"""Episode outcomes as people read them on every page: `budget exhausted`, not
`budget_exhausted`."""

from __future__ import annotations

from rollout_core.records import Outcome

OUTCOME_LABELS: dict[Outcome, str] = {
    "correct": "correct",
    "wrong": "wrong",
    "budget_exhausted": "budget exhausted",
    "error": "error",
    "abandoned": "abandoned",
}


def outcome_label(outcome: Outcome | None) -> str:
    """An outcome in words; `playing` for an episode not finished yet."""
    return "playing" if outcome is None else OUTCOME_LABELS[outcome]
