"""The delivery engine. The rows hold all the state; a task only says "look now".

A delivery's path, call by call. Six hand-offs (==>) cross to another process or thread;
every other step is a plain call on the same thread.

In the process whose transaction publishes (a web request, a node report, a task):
    webhooks.services.publish_event         bulk-creates the rows: pending, due now
    -> webhooks.dispatch.request_attempts -> gshost.handoff.after_commit (on_commit)
    after the commit: gshost.handoff.queue_now -> django_q.tasks.async_task
==> 1. the broker (Redis, or django-q2's ORM table) holds "attempt these (delivery id,
    webhook id)". A broker that cannot be reached is logged and counted, never raised.

In `manage.py qcluster` (django-q2's processes, see ``process``):
==> 2. the pusher process: broker.dequeue -> the cluster's task queue
==> 3. a worker process: django_q.worker -> webhooks.tasks.attempt_deliveries
    -> engine.attempt_deliveries -> engine.Engine.wake: the ids join the process's named
    rows and the senders are notified; the task ends there (its result goes to django-q2's
    monitor process, off this path).
==> 4. a sender thread of that worker (started with it: process.start_in_worker ->
    engine.get_engine): Engine._run -> _round -> _next_claim -> _claim
    -> claims.claim_due (named rows by id, else the due scan: claims.due), leasing up to
    WEBHOOK_CLAIM_ROWS rows that every sender of the process then takes from.
    Engine._attempt -> engine.send_delivery -> webhooks.targets.signed.send_signed:
    url_safety.check_webhook_url, secrets.signing_keys (decrypt), signed.signed_headers, then
    targets.client.get_sender().send -> transport.WebhookSender._attempt
==> 5. a resolver thread per attempt (transport._resolve_in_time): getaddrinfo, given up
    at the attempt's deadline. Back on the sender: each address checked, the connection
    pinned to one, POST through a keep-alive pool, at most 64 KiB of the answer read.
    Engine._record: the finished attempt joins the process's finished queue
==> 6. whichever sender takes the recording lock (often the same one) writes every attempt
    waiting: engine._record -> record.record_attempts -> policy.after_attempt, then one
    statement on PostgreSQL (record.write_in_one_statement) or a transaction elsewhere;
    after its commit, record._after_commit -> metrics.attempts_recorded and
    health.notices.deliveries_failed (the owners' email, on that thread).

Without a task (a retry, a lost hand-off, the rows of a dead worker whose lease ran out), an
idle sender's due scan finds the row within ``engine.IDLE_SECONDS``: the path from 4.
Stopping: ``engine`` (the senders), ``process`` (SIGTERM in django-q2).
"""
