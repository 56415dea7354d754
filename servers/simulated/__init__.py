"""The simulated node: the built-in node whose agent runs in process.

`agent` answers the agent's routes as an agent does (requests finished after
`SIMULATED_RUNTIME_DELAY_SECONDS`), `host` finishes what is due from the rows, `numbers`
invents plausible players, stats and metrics, and `mishaps` are what staff can make a host do on
purpose (`manage.py simulate`, the admin).
"""
