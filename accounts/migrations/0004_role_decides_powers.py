"""The role becomes the one source of a user's powers (User.save derives is_staff and
is_superuser from it). Existing superusers become lab admins first, so nobody who runs
the site today loses access on upgrade; then every user's flags are brought in step."""

from django.db import migrations

import accounts.models

ADMIN = "admin"


def role_from_superuser_then_sync_flags(apps, schema_editor):  # type: ignore[no-untyped-def]
    # Historical models have no custom save(): the flags are written here explicitly.
    User = apps.get_model("accounts", "User")
    User.objects.filter(is_superuser=True).exclude(role=ADMIN).update(role=ADMIN)
    User.objects.filter(role=ADMIN).update(is_staff=True, is_superuser=True)
    User.objects.exclude(role=ADMIN).update(is_staff=False, is_superuser=False)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_auditentry"),
    ]

    operations = [
        migrations.AlterModelManagers(
            name="user",
            managers=[
                ("objects", accounts.models.LabUserManager()),
            ],
        ),
        # Nothing to undo: the flags stay as they were made, consistent with the roles.
        migrations.RunPython(role_from_superuser_then_sync_flags, migrations.RunPython.noop),
    ]
