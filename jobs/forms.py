"""The submit form: friendly text inputs turned into a JobSpec for `job_submit`."""

from __future__ import annotations

import shlex

from django import forms

from accounts.models import User

from .choices import Consolidation
from .services import JobSpec


class JobSubmitForm(forms.Form):
    name = forms.CharField(
        max_length=128, required=False, help_text="Optional; defaults to the command."
    )
    image = forms.CharField(
        max_length=255,
        help_text="Container image, e.g. pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
    )
    command = forms.CharField(
        max_length=16384,
        help_text="Split like a shell would (quotes group words) but never run through a shell.",
    )
    num_gpus = forms.IntegerField(min_value=0, initial=1, label="GPUs")
    accepted_types = forms.CharField(
        required=False,
        label="Acceptable GPU types",
        help_text="Comma-separated, most preferred first; empty = any.",
    )
    consolidation = forms.ChoiceField(
        choices=Consolidation.choices, initial=Consolidation.PREFERRED
    )
    walltime_minutes = forms.IntegerField(
        required=False, min_value=1, label="Walltime (minutes)", help_text="Optional limit."
    )
    max_retries = forms.IntegerField(min_value=0, initial=0)
    env = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Environment",
        help_text="One NAME=value per line.",
    )
    group = forms.ChoiceField(required=False)

    def __init__(self, *args, user: User, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        groups = list(user.lab_groups.order_by("name").values_list("name", flat=True))
        self.fields["group"].choices = [("", "default")] + [(name, name) for name in groups]
        if user.default_group_id:
            self.fields["group"].initial = user.default_group.name

    def clean_command(self) -> list[str]:
        try:
            argv = shlex.split(self.cleaned_data["command"])
        except ValueError as exc:
            raise forms.ValidationError(f"Cannot split the command: {exc}.") from exc
        if not argv:
            raise forms.ValidationError("Give a command.")
        return argv

    def clean_accepted_types(self) -> list[str]:
        raw = self.cleaned_data.get("accepted_types") or ""
        return [part.strip() for part in raw.split(",") if part.strip()]

    def clean_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for number, line in enumerate((self.cleaned_data.get("env") or "").splitlines(), start=1):
            if not line.strip():
                continue
            name, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(f"Line {number} is not NAME=value.")
            env[name.strip()] = value
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
        )


# Service error keys that are not form fields land on the matching form field, or on top.
SERVICE_FIELD_TO_FORM_FIELD = {"walltime_seconds": "walltime_minutes"}
