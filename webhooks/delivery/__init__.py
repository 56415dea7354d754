"""The delivery engine. How a delivery moves (the rows hold the state; a queue only says
"look at row N now"):

1. ``publish_event`` writes a row (pending, due now); after commit ``dispatch.request_attempts``
   queues the django-q2 task ``attempt_deliveries`` naming it. If the broker is down, nothing
   is raised: the timer (5) finds the row.
2. In the worker, the task hands the row to the process's ``engine``, which started with the
   process (django-q2's ``post_spawn``). Its ``pool`` dispatcher ``claims`` the row: a lease,
   never more rows than idle sender threads, at most a few per webhook on the network.
3. A ``sender`` thread re-checks the URL, decrypts the secret, signs, and makes the attempt
   over the ``transport`` (DNS-pinned HTTPS, 10 s deadline, pooled keep-alive connections).
4. The ``recorder`` writes the attempt and the row's next state, decided by ``policy``
   (success, retry when, fail when) from the state the claim read, in one transaction per
   batch (``batch_writes``: one statement on PostgreSQL), and so releases the lease.
5. The ``timer`` sleeps until the next row falls due (at most a second), then offers every due
   row to the pool: retries, redeliveries, rows whose task was lost, expired leases of a dead
   worker. No broker is needed for that.
6. On stop the engine claims nothing more, lets attempts on the network finish for up to 10 s,
   records them and gives back unfinished leases; on a crash, leases expire and (5) retakes them.
"""
