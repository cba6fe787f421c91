"""The failure-class mix moved to `app.dashboard.failures.mix`: this name stays until Runs and
Compare import it from there."""

from app.dashboard.failures.mix import (
    CLASS_COLORS,
    P_CLASS,
    episodes_link,
    mix_chart,
    shares,
    shift_table,
    show_shift,
)

__all__ = [
    "CLASS_COLORS",
    "P_CLASS",
    "episodes_link",
    "mix_chart",
    "shares",
    "shift_table",
    "show_shift",
]
