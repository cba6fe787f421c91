"""The four tools every TRL tool environment gives the model. TRL builds each tool's schema
from its method's name, docstring and arguments, so the in-process environment and the
server's client share these methods and differ only in how `_act` plays the action."""

from __future__ import annotations

from rollout_core.actions import tool_call_text
from rollout_core.records import ActionKind


class SQLTools:
    """DESCRIBE, SAMPLE, QUERY and ANSWER as tool methods over `_act`."""

    def _act(self, kind: ActionKind, argument: str, call: str) -> str:
        """Play the action; `call` is the model's tool call as the step's raw output records
        it (the model's text around the call never reaches a tool)."""
        raise NotImplementedError

    def describe(self, table: str) -> str:
        """Show the columns, types, keys and row count of a table.

        Args:
            table: The table's name.
        """
        return self._act("DESCRIBE", table, tool_call_text("describe", {"table": table}))

    def sample(self, table: str) -> str:
        """Show the first rows of a table.

        Args:
            table: The table's name.
        """
        return self._act("SAMPLE", table, tool_call_text("sample", {"table": table}))

    def query(self, sql: str) -> str:
        """Run one SELECT statement on the database and show its rows.

        Args:
            sql: A single SQLite SELECT statement.
        """
        return self._act("QUERY", sql, tool_call_text("query", {"sql": sql}))

    def answer(self, value: str) -> str:
        """Submit the final answer; the episode ends.

        Args:
            value: The answer; several values as a JSON list, e.g. ["a", "b"].
        """
        return self._act("ANSWER", value, tool_call_text("answer", {"value": value}))
