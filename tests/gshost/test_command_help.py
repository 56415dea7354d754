"""An operator's first look at a command is its help: every command of the project's apps
answers `help NAME` and `NAME --help` with its usage, never a traceback."""

import io
from contextlib import redirect_stdout

import pytest
from django.apps import apps
from django.core.management import ManagementUtility, get_commands

PROJECT_APPS = {"accounts", "audit", "webhooks", "servers", "gshost"}


def _project_commands() -> list[str]:
    app_names = {config.name for config in apps.get_app_configs() if config.label in PROJECT_APPS}
    return sorted(name for name, app in get_commands().items() if app in app_names)


def _run_manage(*argv: str) -> str:
    output = io.StringIO()
    with redirect_stdout(output):
        try:
            ManagementUtility(["manage.py", *argv]).execute()
        except SystemExit as exit_:
            assert exit_.code in (0, None)
    return output.getvalue()


def test_the_project_has_commands_to_check() -> None:
    assert {"createnode", "createserver", "createorg"} <= set(_project_commands())


@pytest.mark.parametrize("command", _project_commands())
def test_it_prints_help_for_every_command(command: str) -> None:
    assert f"usage: manage.py {command}" in _run_manage("help", command)


@pytest.mark.parametrize("command", _project_commands())
def test_it_prints_usage_for_every_command_given_help_flag(command: str) -> None:
    assert f"usage: manage.py {command}" in _run_manage(command, "--help")
