"""How a store is named where people see it: a server URL without its password."""

from __future__ import annotations


def shown_url(url: str) -> str:
    """`url` with its password hidden (`user:***@host`); a path or file URL as it is."""
    if "://" not in url:
        return url
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL could not have opened; show nothing of it
        return "URL"
