"""How the engine rides on django-q2's processes: started with each worker (``post_spawn``),
stopped in order whether SIGTERM reaches the cluster's main process or its whole group.

django-q2's orderly stop starts in the main process (a STOP per worker, queued behind the
tasks). A SIGTERM to the whole group (systemd's default) would also kill the sentinel, where
django-q2 resets SIGTERM to the default, and the workers. So ``qcluster``'s main process forks
its children with SIGTERM blocked (the mask is inherited), and a worker takes its SIGTERMs with
``signal.sigwaitinfo``: its parent's (a task over its timeout) ends it as the default would,
anyone else's is left to the orderly stop. django-q2 ignores SIGINT in every child.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Sequence
from typing import Any

from gshost import process_state

logger = logging.getLogger(__name__)

# The process whose forks the at-fork hook shields (qcluster's main process), if any. The hook
# itself cannot be removed once installed: resetting this makes it do nothing.
_shielded_pid: int | None = None
_hook_installed = False


def shield_cluster_children(argv: Sequence[str]) -> None:
    """In the main process of ``manage.py qcluster``: fork children with SIGTERM blocked."""
    global _shielded_pid, _hook_installed
    if list(argv[1:2]) != ["qcluster"]:
        return
    _shielded_pid = os.getpid()
    if not _hook_installed:
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent)
        _hook_installed = True


def _before_fork() -> None:
    if os.getpid() == _shielded_pid:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _after_fork_in_parent() -> None:
    if os.getpid() == _shielded_pid:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def stop_shielding() -> None:
    global _shielded_pid
    _shielded_pid = None


def start_in_worker(**_signal_kwargs: Any) -> None:
    """django-q2's ``post_spawn`` receiver: start the engine with the worker process."""
    from webhooks.delivery.engine import get_engine

    get_engine()
    if signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        threading.Thread(target=_end_at_parents_sigterm, name="worker-sigterm", daemon=True).start()


def _end_at_parents_sigterm() -> None:
    while True:
        sender = signal.sigwaitinfo({signal.SIGTERM}).si_pid
        if sender == os.getppid():
            os.kill(os.getpid(), signal.SIGKILL)  # leases in flight run out and are retaken
        logger.info("SIGTERM from pid %s left to the cluster's orderly stop", sender)


process_state.register(
    "webhooks.cluster_shield",
    bound="one at-fork hook, installed once, acting in qcluster's main process only",
    reset=stop_shielding,
)
