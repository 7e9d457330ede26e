"""A DAG node's ``command`` is a list of words, as everywhere (containers 0014).

A command stored as one string (in a DAG template's nodes, a run's graph, or the
template snapshots a run keeps) was run with ``sh -c``: it becomes ``["sh", "-c",
<the string>]``, so every node runs exactly what it ran before.
"""

from django.db import migrations


def _listed(command):
    if isinstance(command, str):
        return ["sh", "-c", command] if command else None
    return command


def _nodes(nodes):
    changed = False
    for node in nodes if isinstance(nodes, list) else []:
        if isinstance(node, dict) and isinstance(node.get("command"), str):
            node["command"] = _listed(node["command"])
            changed = True
    return changed


def strings_to_lists(apps, schema_editor):
    DagTemplate = apps.get_model("dags", "DagTemplate")
    DagRun = apps.get_model("dags", "DagRun")
    for dag in DagTemplate.objects.all().only("pk", "nodes"):
        if _nodes(dag.nodes):
            DagTemplate.objects.filter(pk=dag.pk).update(nodes=dag.nodes)
    for run in DagRun.objects.all().only("pk", "graph", "templates"):
        changed = _nodes(run.graph)
        for snapshot in (run.templates or {}).values():
            if isinstance(snapshot, dict) and isinstance(snapshot.get("command"), str):
                snapshot["command"] = _listed(snapshot["command"]) or []
                changed = True
        if changed:
            DagRun.objects.filter(pk=run.pk).update(graph=run.graph, templates=run.templates)


class Migration(migrations.Migration):
    dependencies = [
        ("dags", "0003_node_output"),
        ("containers", "0014_command_is_a_list"),
    ]

    operations = [
        migrations.RunPython(strings_to_lists, migrations.RunPython.noop),
    ]
