"""The customers of the load test: one Locust user per API key, polling what customers poll
most (the server list, a server's players and realtime stats, the audit log), each key about
once every LOAD_PACING_SECONDS. The keys and their servers come from LOAD_KEYS_FILE (JSON:
[{"key", "servers"}]), written by bench/load/run.py."""

from __future__ import annotations

import itertools
import json
import os
import random

from locust import constant_pacing, task
from locust.contrib.fasthttp import FastHttpUser

API = "/api/public/v1"
with open(os.environ["LOAD_KEYS_FILE"]) as keys_file:
    KEYS = json.load(keys_file)
_next_key = itertools.count()


class Customer(FastHttpUser):
    wait_time = constant_pacing(float(os.environ.get("LOAD_PACING_SECONDS", "30")))
    # Locust's own pool: a customer keeps one connection to the load balancer.
    concurrency = 1

    def on_start(self) -> None:
        mine = KEYS[next(_next_key) % len(KEYS)]
        self.headers = {"Authorization": f"Bearer {mine['key']}"}
        self.servers = mine["servers"]

    def _get(self, path: str, name: str) -> None:
        self.client.get(f"{API}{path}", headers=self.headers, name=name)

    @task(4)
    def server_list(self) -> None:
        self._get("/servers", "/servers")

    @task(3)
    def realtime_stats(self) -> None:
        self._get(f"/servers/{random.choice(self.servers)}/realtime-stats", "realtime-stats")

    @task(2)
    def players(self) -> None:
        self._get(f"/servers/{random.choice(self.servers)}/players", "players")

    @task(1)
    def audit(self) -> None:
        self._get("/account/audit?limit=20", "audit")
