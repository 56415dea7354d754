"""The control plane as a cluster on one machine (`make cluster`, `python -m cluster`).

HAProxy in front of several gunicorn replicas, PgBouncer in transaction mode in front of
PostgreSQL, several `qcluster` worker hosts and a Redis of its own. Each replica and worker
runs in a network namespace of its own, reached over a bridge, as it would on a machine of its
own. Development and test tooling: the service itself does not import it.
"""
