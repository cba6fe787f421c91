"""`python -m app.cli`, as the dashboard's Launch starts its workers."""

from app.cli import main

if __name__ == "__main__":  # not when a spawned worker process imports this module
    main()
