"""AuditEntry.target_id: an account's audit history follows the account, not its name.

Entries were found by `target_name` alone, so renaming a user or group orphaned its history
and a new account given the old name inherited it. Existing user and group entries get the
id of the account that has their name now; one whose name no account has (deleted, or
renamed since) keeps NULL and shows only in the audit log, not in any account's history.
"""

from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def target_ids_backfill(apps, schema_editor):
    AuditEntry = apps.get_model("accounts", "AuditEntry")
    User = apps.get_model("accounts", "User")
    LabGroup = apps.get_model("accounts", "LabGroup")
    for kind, accounts, name_field in (("user", User, "username"), ("group", LabGroup, "name")):
        owner = accounts.objects.filter(**{name_field: OuterRef("target_name")}).values("pk")
        AuditEntry.objects.filter(target_kind=kind, target_id__isnull=True).update(
            target_id=Subquery(owner[:1])
        )


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0005_alter_auditentry_target_kind"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditentry",
            name="target_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="target_kind",
            field=models.CharField(
                choices=[
                    ("user", "User"),
                    ("group", "Group"),
                    ("scheduler", "Scheduler"),
                    ("node", "Node"),
                    ("device", "Device"),
                    ("agent_token", "Agent token"),
                    ("api_token", "API token"),
                ],
                max_length=16,
            ),
        ),
        # The new field is dropped on the way back: nothing to undo.
        migrations.RunPython(target_ids_backfill, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="auditentry",
            index=models.Index(
                fields=["target_kind", "target_id", "-at", "-id"], name="auditentry_target_at"
            ),
        ),
    ]
