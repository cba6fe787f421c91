"""`python -m app.cli`, as the dashboard's Launch starts its workers."""

from app.cli import main

main()
