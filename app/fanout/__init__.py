"""Ray fan-out: one run's episodes played by many Ray actors, recorded in one store.

`target` says where (pure, no Ray import), `shards` how the episodes are split, `worker` is the
actor, `driver` hands out shards and records what comes back, `cluster` ties them to
`app.batch` as a `Fanout`.
"""
