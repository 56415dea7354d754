"""The delivery engine. The rows hold all the state; a task only says "look now".

One delivery's path, from the hand-off to the recorded attempt (2 thread hand-offs, about 10 calls):

1. ``services.publish_event`` writes the row (pending, due now); after commit
   ``dispatch.request_attempts`` queues the django-q2 task ``attempt_deliveries`` (a broker
   outage is logged, never raised: a sender's due scan finds the row within a second anyway).
2. [hand-off 1: broker -> worker process] ``tasks.attempt_deliveries`` ->
   ``engine.attempt_deliveries``: the row's id joins the process's named rows, senders wake.
3. [hand-off 2: task thread -> sender threads] a sender (``engine.Engine._round``) takes the
   next of the rows its process holds; when none are left, it claims up to
   ``WEBHOOK_CLAIM_ROWS`` for every sender (``claims.claim_due``: named rows by id, else the
   due scan; ``claims.due`` is the one definition of due; one ``UPDATE … SKIP LOCKED …
   RETURNING`` on PostgreSQL; lease = attempt deadline + margin).
4. ``engine.send_delivery`` -> ``webhooks.targets.signed.send_signed`` re-checks the URL,
   decrypts the secret, signs (ours and Standard Webhooks), and POSTs (DNS-pinned HTTPS,
   private addresses refused, 10 s deadline).
5. ``record.record_attempts`` writes the attempt and the row's next state (``policy``), with
   any other attempts finished meanwhile in the process (whichever sender gets the recording
   lock writes them all: one statement on PostgreSQL), compare-and-set on the lease; then
   ``recording_hooks`` (metrics, notices).

Retries, lost hand-offs and a dead worker's expired leases need no task: an idle sender looks
every half second. Stopping: ``engine`` (the senders), ``process`` (SIGTERM in django-q2).
"""
