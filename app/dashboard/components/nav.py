"""Page paths (relative to main.py) and the query-parameter names that make up a URL's state."""

from __future__ import annotations

RUNS = "views/runs.py"
EPISODES = "views/episodes.py"
REPLAY = "views/replay.py"
COMPARE = "views/compare.py"
LAUNCH = "views/launch.py"
TRAINING = "views/training.py"
GROUPS = "views/groups.py"
MAP = "views/checkpoint_map.py"

P_RUN = "run"
"""A run id; repeated for several runs (Episodes filter, Compare)."""
P_EPISODE = "episode"
P_STEP = "step"
"""1-based step number in a replay."""
P_QUESTION = "question"
P_CURSOR = "cursor"
"""Episodes page: the stack of keyset cursors of the pages before this one, repeated."""
