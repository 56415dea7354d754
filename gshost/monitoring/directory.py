"""Where prometheus-client keeps its multi-process files: one rule for the settings (every
Django process) and for gunicorn's master, which never loads the settings but must find the
files of a worker that exited. Nothing here imports prometheus_client, which reads the
variable when it loads."""

import hashlib
import os
import tempfile
from pathlib import Path


def multiproc_dir(base_dir: Path) -> str:
    """``PROMETHEUS_MULTIPROC_DIR`` when set, else a directory under the system's temporary
    directory named after the checkout, so two checkouts on one machine never mix samples."""
    digest = hashlib.sha256(str(base_dir).encode()).hexdigest()[:12]
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or str(
        Path(tempfile.gettempdir()) / f"gshost-prometheus-{digest}"
    )
