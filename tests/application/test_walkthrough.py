"""docs/application-api.md's walk-through, its exact lines run by bash against the running
service: lookup, create, poll, suspend, unsuspend, delete."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from accounts.models import Organization
from application.models import SoldServer
from servers.models import Server
from tests.application.conftest import mint

DOC = Path(__file__).resolve().parents[2] / "docs" / "application-api.md"
SECTION = "## A billing module, step by step"
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)


def walkthrough() -> str:
    section = DOC.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    return "\n".join(SH_BLOCK.findall(section))


@pytest.mark.skipif(shutil.which("jq") is None, reason="the walk-through uses jq")
def test_the_documented_walkthrough_runs_against_the_service(live_server):
    script = walkthrough()
    assert script.count("curl ") == 7

    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env={**os.environ, "GSHOST": live_server.url, "GSHOST_KEY": mint()},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    server = Server.objects.get()
    assert done.stdout.split() == [server.id, "is", "stopped", "true", "false", "204"]
    assert server.deleting and not SoldServer.objects.filter(external_id="order-1001").exists()
    assert Organization.objects.get().customer.external_id == "client-42"
