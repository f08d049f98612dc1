"""LabGroup.guaranteed_gpus: GPUs a group gets back by preempting borrowed ones (NULL:
none), never above the group's own max_gpus (a CHECK, as the quota service refuses it)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0006_auditentry_target_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="labgroup",
            name="guaranteed_gpus",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="GPUs the group can always get back (preempting borrowed ones).",
                null=True,
            ),
        ),
        migrations.AddConstraint(
            model_name="labgroup",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("guaranteed_gpus__isnull", True),
                    ("max_gpus__isnull", True),
                    ("guaranteed_gpus__lte", models.F("max_gpus")),
                    _connector="OR",
                ),
                name="labgroup_guarantee_within_cap",
            ),
        ),
    ]
