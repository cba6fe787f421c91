"""`rollscope env-server`: the SQL environment served over OpenEnv's protocol, recording every
session in the store.

The server runs OpenEnv's production mode, never its web interface, whose module (imported by
`openenv.core`'s own `__init__`, which tolerates its absence) loads gradio: most of a server's
and each worker's start-up. Marking it absent before openenv is first imported skips it; a
process that imported openenv before keeps what it has."""

import sys

sys.modules.setdefault("openenv.core.env_server.web_interface", None)  # type: ignore[arg-type]
