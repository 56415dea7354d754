"""The simulated node: the built-in node without an agent, the default `SERVER_RUNTIME`.

`runtime` is its `Runtime` (requests finished after `SIMULATED_RUNTIME_DELAY_SECONDS`), `host`
finishes what is due from the rows, `numbers` invents plausible players, stats and metrics,
and `mishaps` are what staff can make a host do on purpose (`manage.py simulate`, the admin).
"""
