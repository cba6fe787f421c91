"""Sums of floats that may pass a float's range (rewards of 1e300 from a file or a Recorder):
SQLite's arithmetic gives inf there, PostgreSQL's raises "value out of range: overflow".

Reads sum in floats and, only on PostgreSQL's overflow, read again summing exact numerics
(much slower, so never first), whose totals past the range come back as inf; the run's
running reward sum is added with a saturating `+`."""

from __future__ import annotations

import functools
import math
import operator
import sys
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Float, Numeric, Row, Select, and_, case, cast, func, literal, type_coerce
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import InstrumentedAttribute, Session
from sqlalchemy.sql.elements import ColumnElement

Column = ColumnElement[Any] | InstrumentedAttribute[Any]

NUMERIC_VALUE_OUT_OF_RANGE = "22003"
"""PostgreSQL's error code for a float result past the range."""


def float_sum(*factors: Column, exact: bool = False) -> ColumnElement[Any]:
    """SUM of the factors' product, as a float; `exact`: summed as numerics, so no row or
    running total overflows on the way."""
    terms = [cast(f, Numeric) for f in factors] if exact else list(factors)
    total = func.sum(functools.reduce(operator.mul, terms))
    return type_coerce(total, Float()) if exact else total


def rows(session: Session, query: Callable[[bool], Select[Any]]) -> Sequence[Row[*tuple[Any, ...]]]:
    """The rows of `query(exact=False)`, or where PostgreSQL's float arithmetic overflowed,
    of `query(exact=True)`. The session reads only: its failed transaction is rolled back."""
    try:
        return session.connection().execute(query(False)).all()
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != NUMERIC_VALUE_OUT_OF_RANGE:
            raise
    session.rollback()
    return session.connection().execute(query(True)).all()


def saturating_add(a: Column, b: Any) -> ColumnElement[Any]:
    """a + b in SQL, inf of their sign where the sum passes a float's range."""
    biggest = sys.float_info.max
    return case(
        (and_(a > 0, b > 0, a > biggest - b), literal(math.inf)),
        (and_(a < 0, b < 0, a < -biggest - b), literal(-math.inf)),
        else_=a + b,
    )
