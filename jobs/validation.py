"""Syntax rules for a submission, as pure functions returning error messages.

The service (`jobs.services.job_submit`) runs these first and the database-backed rules
(known device types, cluster capacity, quotas) after; every failure names its field.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from config.text_guards import text_problem

# Docker/OCI image reference grammar (distribution/reference): [domain[:port]/]path[:tag][@digest]
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?)"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_RE = re.compile(
    rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?$"
)
ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")

# Set by the launcher to pin the job to its devices; a user value would escape isolation.
RESERVED_ENV_NAMES = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"})
RESERVED_ENV_PREFIX = "GPULAB_"

MAX_IMAGE_LENGTH = 255
MAX_NAME_LENGTH = 128  # Job.name's column
# A sanity bound before the cluster's own (no job is ever given more than one device
# type's GPUs), so an absurd count is refused before any query.
MAX_GPUS_PER_JOB = 4096
MAX_ARG_LENGTH = 8192
MAX_ARGS = 1024
MAX_ENV_VARS = 256
MAX_ENV_VALUE_LENGTH = 8192
MAX_WALLTIME_SECONDS = 30 * 24 * 3600
# A launch reaches the node as one argument (sshd runs `$SHELL -c <script>`), and Linux
# refuses any single argument over 128 KiB ("Argument list too long"). Inside it, argv
# and environment are shell-quoted twice (the runtime's script, then `sh -c` around it:
# a quote costs up to 17 bytes). These budgets for the twice-quoted text leave 32 KiB
# for the rest: the wrapper, gpulab's own variables, paths, docker's flags.
MAX_COMMAND_LAUNCH_BYTES = 64 * 1024
MAX_ENV_LAUNCH_BYTES = 32 * 1024
MAX_RETRIES = 10


def image_errors(image: Any) -> list[str]:
    if not isinstance(image, str) or not image:
        return ["Give a container image, e.g. 'pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime'."]
    if len(image) > MAX_IMAGE_LENGTH:
        return [f"At most {MAX_IMAGE_LENGTH} characters."]
    if not IMAGE_RE.match(image):
        return [
            f"{image!r} is not an image reference: expected [registry/]name[:tag][@digest] "
            "with a lower-case name, e.g. 'nvcr.io/nvidia/pytorch:24.05-py3'."
        ]
    return []


def command_errors(command: Any) -> list[str]:
    if not isinstance(command, list) or not command:
        return [
            "Give the command as a non-empty list of strings (argv), e.g. ['python', 'train.py']."
        ]
    if len(command) > MAX_ARGS:
        return [f"At most {MAX_ARGS} arguments."]
    errors = []
    for position, argument in enumerate(command):
        if not isinstance(argument, str):
            errors.append(f"Argument {position} is not a string.")
        elif (problem := text_problem(argument)) is not None:
            errors.append(f"Argument {position} {problem}.")
        elif len(argument) > MAX_ARG_LENGTH:
            errors.append(f"Argument {position} is longer than {MAX_ARG_LENGTH} characters.")
    if not errors and not command[0].strip():
        errors.append("The program (argument 0) is empty.")
    # The `process` runtime starts the program through `env`, which reads a first word
    # with '=' as one more variable (`agents.runtimes.process_argv`). Refused here, where
    # the runtime is not known yet, rather than failing a job that waited its turn.
    if not errors and "=" in command[0]:
        errors.append(
            "The program (argument 0) may not contain '=': a node would take it for an "
            "environment variable. Set variables in `env` instead."
        )
    if not errors and (size := launch_bytes(command)) > MAX_COMMAND_LAUNCH_BYTES:
        errors.append(
            f"The command is too long to launch: {size} bytes once quoted for the node's "
            f"shell, at most {MAX_COMMAND_LAUNCH_BYTES}. Pass large inputs in a file instead."
        )
    return errors


def env_errors(env: Any) -> list[str]:
    if not isinstance(env, dict):
        return ["Give environment variables as an object of NAME: value strings."]
    if len(env) > MAX_ENV_VARS:
        return [f"At most {MAX_ENV_VARS} variables."]
    errors = []
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            errors.append(f"{name!r} is not a variable name: use [A-Z_][A-Z0-9_]*.")
        elif name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIX):
            errors.append(f"{name} is set by gpulab itself and cannot be overridden.")
        elif not isinstance(value, str):
            errors.append(f"The value of {name} is not a string.")
        elif (problem := text_problem(value)) is not None:
            errors.append(f"The value of {name} {problem}.")
        elif len(value) > MAX_ENV_VALUE_LENGTH:
            errors.append(f"The value of {name} is longer than {MAX_ENV_VALUE_LENGTH} characters.")
    # Measured as apptainer gets them (APPTAINERENV_NAME=value), the longest form.
    words = [f"APPTAINERENV_{name}={value}" for name, value in env.items()]
    if not errors and (size := launch_bytes(words)) > MAX_ENV_LAUNCH_BYTES:
        errors.append(
            f"The variables are too long to launch: {size} bytes once quoted for the "
            f"node's shell, at most {MAX_ENV_LAUNCH_BYTES}. Pass large values in a file instead."
        )
    return errors


def launch_bytes(words: list[str]) -> int:
    """How many bytes `words` take in the one argument a launch sends to the node:
    quoted for the runtime's script, then again for `sh -c` around it."""
    return len(shlex.quote(shlex.join(words)).encode())


def integer_errors(value: Any, *, minimum: int, maximum: int | None = None) -> list[str]:
    # bool is an int in Python; `true` GPUs is a client bug, not 1 GPU.
    if isinstance(value, bool) or not isinstance(value, int):
        return ["Must be a whole number."]
    if value < minimum:
        return [f"Must be at least {minimum}."]
    if maximum is not None and value > maximum:
        return [f"Must be at most {maximum}."]
    return []


MAX_DEPENDENCIES = 64
MAX_ARRAY_SIZE = 1000
# Job ids are PostgreSQL bigints: a larger number is no job, and would fail the query.
MAX_JOB_ID = 2**63 - 1


def dependency_ids_errors(value: Any) -> list[str]:
    """A list of distinct job ids (the database checks that they are the submitter's)."""
    if not isinstance(value, list) or not all(
        isinstance(item, int) and not isinstance(item, bool) and 0 < item <= MAX_JOB_ID
        for item in value
    ):
        return ["Give a list of job ids (whole numbers), e.g. [12, 13]."]
    if len(set(value)) != len(value):
        return ["A job is listed twice."]
    if len(value) > MAX_DEPENDENCIES:
        return [f"At most {MAX_DEPENDENCIES} jobs."]
    return []


def accepted_types_errors(accepted_types: Any, known: set[str]) -> list[str]:
    if not isinstance(accepted_types, list) or not all(isinstance(t, str) for t in accepted_types):
        return ["Give a list of device type names (empty = any)."]
    errors = []
    if len(set(accepted_types)) != len(accepted_types):
        errors.append("A device type is listed twice.")
    unknown = [name for name in accepted_types if name not in known]
    if unknown:
        listed = ", ".join(sorted(known)) or "none defined yet"
        errors.append(f"Unknown device type(s): {', '.join(unknown)}. Known: {listed}.")
    return errors
