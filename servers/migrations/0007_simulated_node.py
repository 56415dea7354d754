"""The built-in node `simulated`, and every server that existed before nodes put on it."""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Node = apps.get_model("servers", "Node")
    Server = apps.get_model("servers", "Server")
    node, _ = Node.objects.get_or_create(name="simulated", defaults={"kind": "simulated"})
    Server.objects.filter(node__isnull=True).update(node=node)


class Migration(migrations.Migration):
    dependencies = [("servers", "0006_nodes")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
