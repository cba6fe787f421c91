"""The figures Python writes (the CLI's tables, Compare's cards, the groups' counts) round as
the dashboard's browser tables do, checked against Chromium's own `toFixed`: a run with 29
steps over 8 episodes reads 3.63 steps on Runs and on Compare, not 3.63 on one and 3.62 on
the other (Python's format rounds an exact tie to even)."""

from __future__ import annotations

import random
from typing import Any

from app.render import fixed, fmt_pct, fmt_signed
from tests.browser.conftest import open_page


def _values() -> list[tuple[float, int]]:
    draw = random.Random(7)
    # Exact ties (k/8, k/16 ...) are where the two roundings part; the rest keep them honest.
    ties = [(draw.randrange(-4000, 4000) / 2 ** draw.randrange(1, 6), d) for d in (0, 1, 2, 3)]
    ties += [(draw.randrange(-(10**6), 10**6) / 16, draw.randrange(0, 4)) for _ in range(400)]
    plain = [(draw.uniform(-1000, 1000), draw.randrange(0, 5)) for _ in range(400)]
    return [(3.625, 2), (56.25, 1), (1.005, 2), (2.5, 0), (-2.5, 0), *ties, *plain]


def test_fixed_digits_are_chromiums(chromium: Any) -> None:
    values = _values()
    with open_page(chromium) as page:
        written = page.evaluate("pairs => pairs.map(([v, d]) => v.toFixed(d))", values)
    # toFixed writes a negative that rounds to zero as "-0.00"; rollscope writes "0.00".
    expected = [w[1:] if w.startswith("-") and not w.strip("-0.") else w for w in written]
    assert [fixed(v, d) for v, d in values] == expected
    assert f"{3.625:.2f}" == "3.62" and fixed(3.625, 2) == "3.63"


def test_percentages_and_differences_round_the_same_way() -> None:
    assert fmt_pct(9 / 16) == "56.3%"  # 56.25
    assert fmt_pct(1 / 3) == "33.3%"
    assert fmt_signed(1 / 16) == "+0.063" and fmt_signed(-1 / 16) == "-0.063"
    assert fmt_signed(-0.0001) == "+0.000"
    assert fixed(float("nan"), 2) == "nan"
    # A reward of 1e308 written out (309 digits) pushed every other column off `runs`.
    assert fixed(1e308, 3) == "1.000e+308" and fmt_signed(-2e20) == "-2.000e+20"
