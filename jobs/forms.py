"""The submit form: friendly text inputs turned into a JobSpec for `job_submit`."""

from __future__ import annotations

import shlex

from django import forms
from django.conf import settings

from accounts.models import User

from .choices import Consolidation, DependencyKind, Notify
from .models import Job
from .selectors import jobs_dependable_by
from .services import JobSpec
from .validation import MAX_ARRAY_SIZE, MAX_COMMAND_LAUNCH_BYTES, MAX_WALLTIME_SECONDS


class JobSubmitForm(forms.Form):
    name = forms.CharField(
        max_length=128, required=False, help_text="Optional; defaults to the command."
    )
    image = forms.CharField(
        max_length=255,
        help_text="Container image, e.g. pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
    )
    # The submission budget, which also binds the API: any command the API accepted fits
    # here once joined back (quoted once is shorter than the twice-quoted budget, and a
    # character is at least a byte), so "clone and resubmit" never exceeds the field.
    command = forms.CharField(
        max_length=MAX_COMMAND_LAUNCH_BYTES,
        help_text="Split like a shell would (quotes group words) but never run through a shell.",
    )
    # Its help names the lab's session limits, read from settings in __init__.
    interactive = forms.BooleanField(required=False, label="Interactive session")
    num_gpus = forms.IntegerField(min_value=1, initial=1, label="GPUs")
    accepted_types = forms.CharField(
        required=False,
        label="Acceptable GPU types",
        help_text=(
            "Comma-separated; empty = any. Best-fit placement tries them in this order; "
            "AlloX (the default) picks the one that serves the job best."
        ),
    )
    consolidation = forms.ChoiceField(
        choices=Consolidation.choices, initial=Consolidation.PREFERRED
    )
    # The service's bound is in seconds; said here in the minutes this field is typed in.
    walltime_minutes = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_WALLTIME_SECONDS // 60,
        error_messages={
            "max_value": f"At most %(limit_value)s minutes ({MAX_WALLTIME_SECONDS // 86400} days)."
        },
        label="Walltime (minutes)",
        help_text="Optional. The job is stopped and fails once it has run this long, "
        "all attempts together.",
    )
    max_retries = forms.IntegerField(
        min_value=0,
        initial=0,
        help_text="Times a non-zero exit is retried, after a backoff of 1 min, doubling.",
    )
    env = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Environment",
        help_text="One NAME=value per line.",
    )
    group = forms.ChoiceField(required=False)
    depends_on = forms.CharField(
        required=False,
        label="Run after jobs",
        help_text="Optional: ids of jobs of yours, e.g. 12, 13 (Slurm's --dependency).",
    )
    dependency = forms.ChoiceField(
        choices=DependencyKind.choices,
        initial=DependencyKind.AFTER_OK,
        required=False,
        label="Start",
        help_text="When those jobs have all succeeded, or all ended however.",
    )

    notify = forms.ChoiceField(
        choices=Notify.choices,
        required=False,
        label="Email me",
        help_text="At your account's address (Slurm's --mail-type).",
    )
    array_size = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_ARRAY_SIZE,
        label="Array size",
        help_text="Optional: submit this many copies; copy i gets GPULAB_ARRAY_INDEX=i "
        "(Slurm's --array), for a sweep.",
    )
    array_max_running = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_ARRAY_SIZE,
        label="Array: at most running",
        help_text="Optional: how many of the copies may hold GPUs at once.",
    )

    def __init__(self, *args, user: User, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        groups = list(user.lab_groups.order_by("name").values_list("name", flat=True))
        self.fields["group"].choices = [("", "default")] + [(name, name) for name in groups]
        if user.default_group_id and user.default_group.name in groups:
            self.fields["group"].initial = user.default_group.name
        # A cloned job's group may not be the submitter's (an admin cloning a student's
        # job): fall back to the default rather than pre-select a choice that is not there.
        if self.initial.get("group") not in (None, "", *groups):
            self.initial.pop("group")
        self.fields["interactive"].help_text = session_help()

    def clean_command(self) -> list[str]:
        try:
            argv = shlex.split(self.cleaned_data["command"])
        except ValueError as exc:
            raise forms.ValidationError(f"Cannot split the command: {exc}.") from exc
        if not argv:
            raise forms.ValidationError("Give a command.")
        return argv

    def clean_depends_on(self) -> list[int]:
        raw = (self.cleaned_data.get("depends_on") or "").replace(",", " ").split()
        ids = [part.removeprefix("#") for part in raw]
        # 19 digits: job ids are bigints (and int() refuses thousands of digits outright).
        bad = [part for part in ids if not (part.isascii() and part.isdigit() and len(part) < 20)]
        if bad:
            raise forms.ValidationError(f"Not a job id: {', '.join(bad)}.")
        return [int(part) for part in ids]

    def clean_accepted_types(self) -> list[str]:
        raw = self.cleaned_data.get("accepted_types") or ""
        return [part.strip() for part in raw.split(",") if part.strip()]

    def clean_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        line_of: dict[str, int] = {}
        repeated: list[str] = []
        for number, line in enumerate((self.cleaned_data.get("env") or "").splitlines(), start=1):
            if not line.strip():
                continue
            name, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(f"Line {number} is not NAME=value.")
            name = name.strip()
            # A second value would silently replace the first: say which lines clash.
            if name in line_of:
                repeated.append(
                    f"{name} is set again on line {number} (first on line {line_of[name]})."
                )
                continue
            line_of[name] = number
            env[name] = value
        if repeated:
            raise forms.ValidationError(repeated)
        return env

    def to_spec(self) -> JobSpec:
        data = self.cleaned_data
        walltime = data.get("walltime_minutes")
        return JobSpec(
            name=data.get("name") or "",
            image=data["image"].strip(),
            command=data["command"],
            num_gpus=data["num_gpus"],
            env=data["env"],
            accepted_types=data["accepted_types"],
            consolidation=data["consolidation"],
            walltime_seconds=walltime * 60 if walltime else None,
            max_retries=data["max_retries"],
            group=data.get("group") or None,
            depends_on=data["depends_on"],
            notify=data.get("notify") or "",
            array_size=data.get("array_size"),
            array_max_running=data.get("array_max_running"),
            dependency=data.get("dependency") or DependencyKind.AFTER_OK,
            interactive=bool(data.get("interactive")),
        )


def session_help() -> str:
    """What ticking "Interactive session" means (jobs.sessions), with the lab's limits."""
    return (
        "A notebook or shell you work in: not preempted (except to give another group back "
        "GPUs it is guaranteed, when your group runs beyond its own guarantee); walltime "
        f"{settings.GPULAB_SESSION_DEFAULT_HOURS} h when none is given, at most "
        f"{settings.GPULAB_SESSION_MAX_HOURS} h; not retried, not an array, on one node. "
        "It gets a port and a token in its environment (JUPYTER_PORT, JUPYTER_TOKEN), and "
        "its page shows the address to open: e.g. the command "
        "jupyter lab --ip=0.0.0.0 --no-browser"
    )


def _dependencies_for(job: Job, user: User) -> tuple[list[int], int]:
    """`job`'s dependencies that `user` may wait for (`jobs_dependable_by`), and how many
    others were left out: a coordinator cloning a member's job must not see the ids of
    that member's jobs, which the job page and the API keep from them too."""
    wanted = list(job.depends_on.values_list("pk", flat=True))
    kept = set(jobs_dependable_by(user=user).filter(pk__in=wanted).values_list("pk", flat=True))
    return [pk for pk in wanted if pk in kept], len(wanted) - len(kept)


def initial_from_job(job: Job, *, user: User) -> dict[str, object]:
    """Form values that resubmit `job` as it was submitted ("clone and resubmit").

    The inverse of `JobSubmitForm.to_spec`: argv back to shell words (`shlex.join`, which
    `clean_command` splits to the same list), env back to NAME=value lines. The group is
    kept only if the new submitter may use it; otherwise the form's default applies, and
    so are dependencies (`_dependencies_for`). The caller has already checked that `user`
    may see `job`.
    """
    walltime = job.walltime_seconds
    initial: dict[str, object] = {
        "name": job.name,
        "image": job.image,
        "command": shlex.join(job.command),
        "num_gpus": job.num_gpus,
        "accepted_types": ", ".join(job.accepted_types),
        "consolidation": job.consolidation,
        # Rounded up: a limit set through the API in seconds must not shrink.
        "walltime_minutes": -(-walltime // 60) if walltime else None,
        "max_retries": job.max_retries,
        "env": "\n".join(f"{name}={value}" for name, value in job.env.items()),
        "depends_on": ", ".join(str(pk) for pk in _dependencies_for(job, user)[0]),
        "dependency": job.dependency,
        "notify": job.notify,
    }
    if job.interactive:  # unticked is the form's default
        initial["interactive"] = True
    if job.group is not None:
        initial["group"] = job.group.name
    return initial


def clone_caveats(job: Job, *, user: User) -> list[str]:
    """What the form cannot carry over from `job` (line breaks in values a job submitted
    through the API may have, dependencies `user` may not wait for): said on the page
    rather than lost silently."""
    caveats = []
    if job.array_id is not None:
        # The launch sets the GPULAB_ARRAY_* variables from the task's array (agents.
        # runtimes); a submitted environment may not name them (GPULAB_ is reserved), so
        # the form cannot carry the index over: a program that reads it would fail or,
        # with a default, quietly run another task's share of the sweep.
        caveats.append(
            f"This is task {job.array_index} of array {job.array_id} ({job.array.size} "
            "tasks): the copy runs as a single job, without GPULAB_ARRAY_INDEX (nor "
            "GPULAB_ARRAY_ID, GPULAB_ARRAY_SIZE), which only an array's tasks get. If "
            f"its program reads the index, give it task {job.array_index}'s settings in "
            "the command, or fill in Array size to submit a whole array again."
        )
    _, left_out = _dependencies_for(job, user)
    if left_out:
        caveats.append(
            f"It waits for {left_out} job{'s' if left_out > 1 else ''} of its owner's, "
            "which yours cannot wait for: left out."
        )
    if any("\n" in arg or "\r" in arg for arg in job.command):
        caveats.append("An argument of the command contains a line break; check the command.")
    broken = sorted(name for name, value in job.env.items() if "\n" in value or "\r" in value)
    if broken:
        caveats.append(
            f"The value of {', '.join(broken)} spans several lines, which this form cannot "
            "hold; submit through the API to keep it."
        )
    return caveats


# Service error keys that are not form fields land on the matching form field, or on top.
SERVICE_FIELD_TO_FORM_FIELD = {"walltime_seconds": "walltime_minutes"}
