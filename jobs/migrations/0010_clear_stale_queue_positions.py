"""Clear `queue_position` on every job that is not PENDING.

Before `job_transition` cleared it as a job leaves the queue, a job kept the last position
a scheduling round wrote (rounds write PENDING rows only): a cancelled, running or finished
job still carried it, and /api/v1/jobs/{id}/ returned it as if the job were queued.
"""

from django.db import migrations

PENDING = "PENDING"  # jobs.choices.JobState.PENDING, as stored; fixed here as of this migration


def clear_stale_queue_positions(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    Job.objects.exclude(state=PENDING).filter(queue_position__isnull=False).update(
        queue_position=None
    )


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0009_allocation_unreleased_index"),
    ]

    operations = [
        # Nothing to restore on the way back: a stale position was never meaningful.
        migrations.RunPython(clear_stale_queue_positions, migrations.RunPython.noop),
    ]
