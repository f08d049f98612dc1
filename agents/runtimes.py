"""The shell commands the control plane runs on a node over SSH, built from argv lists.

Pure functions, no Django and no I/O, so every command is tested exactly. Nothing a user
submitted ever reaches a shell unquoted: the job's image, argv and environment values are
validated again here (a row may predate a rule, or be written by the admin) and every
piece of every command line goes through `shlex.quote`. Users choose no runtime flags:
the flags below are the whole vocabulary.

Runtimes (per node, `cluster.choices.Runtime`):

- `process` and `apptainer` run under one wrapper (`WRAPPER`) that starts the program in
  a new session (its process group id is the wrapper's pid, kept in `pid`), writes its
  stdout and stderr to files in the attempt's run directory and its exit status to
  `exit_code` when it ends (once whatever it left running in its group is ended too).
  Stop = SIGTERM to the process group, the grace period, then SIGKILL.
- `docker` runs a detached container named `gpulab-<job>-<attempt>`; its logs and exit
  code live in Docker (`docker logs`, `docker inspect`), stop is `docker stop -t <grace>`.
  The container runs under Docker's init (`--init`, tini) told to pass signals to the
  program's whole process group, so the stop's SIGTERM reaches the program even when
  argv[0] is a shell (see `docker_run_argv`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from jobs.validation import command_errors, env_errors, image_errors

CONTAINER_PREFIX = "gpulab"
LOG_STREAMS = ("stdout", "stderr")
# What a read of a log returns, live or to keep (`archived_logs_script`): enough bytes for
# 200 ordinary lines; a log of very long lines shows fewer.
LOG_TAIL_BYTES = 64 * 1024

# The wrapper, run by `setsid sh -c WRAPPER gpulab-<job>-<attempt> PROGRAM ARGS...`. It
# is a constant: user input arrives only as its positional parameters ("$@"), never as
# shell text. TERM is trapped with a flag (not ignored: an ignored signal would be
# inherited by the program) so the wrapper outlives the program's checkpoint and records
# its status. `wait` returns 128+15 when the trap fires, hence the loop: while the trap
# fired, wait again. Not "while the program is alive": dash may reap a program that
# exits at that very moment and still answer 143 (its `dowait` collects the child with
# WNOHANG after the signal), so a stopped program that checkpointed and exited 0 read as
# killed about once in a thousand stops; the second `wait` returns the real status. A
# `wait` for a program already waited for answers 127, so that keeps the first status.
#
# When the program ends, whatever it left running in its process group (`cmd &` in a
# script, a data-loader worker) is ended before `exit_code` is written, as Slurm ends
# every process of a step: `exit_code` is what tells the poll the GPU is free, and
# nothing else would ever stop the leftovers. TERM to the group (the wrapper only runs
# its trap), up to 5 s, then KILL to each member but the wrapper, found in /proc (pgrp
# is the 3rd field after the parenthesised name; zombies are already dead). Once a stop
# was sent (`stop-sent`), the stop script owns the timing: no second TERM, and the
# leftovers keep the whole grace period (a `sh -c` job's shell dies at once on TERM
# while its program checkpoints). A process that left the group (its own setsid)
# escapes this, as it escapes the stop. `program_exit` records that the program itself
# has ended at once: a stop arriving during that cleanup is not what ended it.
WRAPPER = (
    'others() { o=; for f in /proc/[0-9]*/stat; do { read -r l < "$f"; } 2>/dev/null '
    "|| continue; q=${l%% *}; set -- ${l##*) }; "
    '[ "$3" = $$ ] && [ "$q" != $$ ] && [ "$1" != Z ] && o="$o $q"; done; }; '
    "echo $$ > pid.tmp && mv pid.tmp pid; trap 'hit=1' TERM; "
    '"$@" > stdout 2> stderr < /dev/null & child=$!; code=; '
    'while :; do hit=; wait "$child"; c=$?; '
    '[ "$c" = 127 ] && [ -n "$code" ] && break; code=$c; [ -n "$hit" ] || break; done; '
    'echo "$code" > program_exit.tmp && mv program_exit.tmp program_exit; '
    'others; [ -n "$o" ] && [ ! -e stop-sent ] && kill -TERM -$$ 2>/dev/null; '
    'i=0; while [ -n "$o" ] && { [ $i -lt 50 ] || [ -e stop-sent ]; }; '
    "do sleep 0.1; others; i=$((i+1)); done; "
    'j=0; while [ -n "$o" ] && [ $j -lt 50 ]; do kill -KILL $o 2>/dev/null; sleep 0.1; '
    "others; j=$((j+1)); done; "
    'echo "$code" > exit_code.tmp && mv exit_code.tmp exit_code'
)


class LaunchRefused(ValueError):
    """The job cannot be launched as stored; the message says which field and why."""


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a runtime needs to start one attempt of one job on one node."""

    job_id: int
    attempt: int
    image: str
    command: Sequence[str]
    env: Mapping[str, str]
    device_uuids: Sequence[str]
    run_root: str  # where attempts' run directories live on the node (relative = $HOME)
    cpus: float | None = None
    memory_mb: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    # (array id, task index, array size) of an array task (Slurm's SLURM_ARRAY_*); None.
    array: tuple[int, int, int] | None = None
    # (port, token) of an interactive session (jobs.sessions); None for a batch job.
    session: tuple[int, str] | None = None

    @property
    def name(self) -> str:
        return attempt_name(self.job_id, self.attempt)

    @property
    def run_dir(self) -> str:
        return f"{self.run_root.rstrip('/')}/{self.name}"


def attempt_name(job_id: int, attempt: int) -> str:
    """`gpulab-<job>-<attempt>`: the container / run directory name of one attempt."""
    return f"{CONTAINER_PREFIX}-{job_id}-{attempt}"


def parse_attempt_name(name: str) -> tuple[int, int] | None:
    """(job, attempt) from `gpulab-<job>-<attempt>`, or None for anything else."""
    parts = name.split("-")
    if len(parts) != 3 or parts[0] != CONTAINER_PREFIX:
        return None
    # isascii too: "²".isdigit() is True, and int("²") raises.
    if not all(part.isascii() and part.isdigit() for part in parts[1:]):
        return None
    return int(parts[1]), int(parts[2])


def progress_file_path(job_id: int, attempt: int) -> str:
    """Where an attempt may write its cumulative work count (`GPULAB_PROGRESS_FILE`).

    A path as the job sees it: inside its container for docker and apptainer, on the host
    for `process`. /tmp because it is writable in every image and apptainer binds the
    host's /tmp; per-attempt names so two plain processes on one node never share a file.
    The node agent (`agents.node_agent.collector.PROGRESS_FILE`) reads the same path
    through /proc/<pid>/root and cannot import this module, so keep the two in step.
    """
    return f"/tmp/gpulab-progress-{job_id}-{attempt}"


def launch_spec_check(spec: LaunchSpec) -> None:
    """Raise LaunchRefused unless image, argv and env pass the submission rules again."""
    problems = [
        *(f"image: {message}" for message in image_errors(spec.image)),
        *(f"command: {message}" for message in command_errors(list(spec.command))),
        *(f"env: {message}" for message in env_errors(dict(spec.env))),
    ]
    for uuid in spec.device_uuids:
        # UUIDs come from NVML (`GPU-8f3c…`); anything else in a --gpus list is an injection.
        if not uuid or not all(ch.isalnum() or ch == "-" for ch in uuid):
            problems.append(f"device: {uuid!r} is not a GPU UUID.")
    if spec.session is not None:
        port, token = spec.session
        # Both are gpulab's own (a port from GPULAB_SESSION_PORTS, a token_urlsafe), but a
        # row may be written from a shell: `-p` and `--env` get nothing else.
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            problems.append(f"session: port {port!r} is not a TCP port.")
        if not token or not all(ch.isascii() and (ch.isalnum() or ch in "-_") for ch in token):
            problems.append("session: the token is not URL-safe text.")
    if problems:
        raise LaunchRefused(f"Job {spec.job_id} cannot be launched: " + " ".join(problems))


def job_environment(spec: LaunchSpec) -> dict[str, str]:
    """The user's variables plus the ones gpulab sets (which the user cannot override)."""
    visible = ",".join(spec.device_uuids)
    array: dict[str, str] = {}
    if spec.array is not None:
        array_id, index, size = spec.array
        array = {
            "GPULAB_ARRAY_ID": str(array_id),
            "GPULAB_ARRAY_INDEX": str(index),
            "GPULAB_ARRAY_SIZE": str(size),
        }
    return {
        **dict(spec.env),
        **session_environment(spec.session),
        "CUDA_VISIBLE_DEVICES": visible,
        "NVIDIA_VISIBLE_DEVICES": visible or "void",
        "GPULAB_JOB_ID": str(spec.job_id),
        "GPULAB_ATTEMPT": str(spec.attempt),
        "GPULAB_IMAGE": spec.image,
        "GPULAB_PROGRESS_FILE": progress_file_path(spec.job_id, spec.attempt),
        **array,
    }


def session_environment(session: tuple[int, str] | None) -> dict[str, str]:
    """A session's port and token, under gpulab's names and the ones Jupyter Server reads
    (so `jupyter lab --ip=0.0.0.0 --no-browser` listens there, token-protected)."""
    if session is None:
        return {}
    port, token = session
    return {
        "GPULAB_SESSION_PORT": str(port),
        "GPULAB_SESSION_TOKEN": token,
        "JUPYTER_PORT": str(port),
        "JUPYTER_TOKEN": token,
        # Jupyter would otherwise move to the next port when this one is busy, and the
        # address gpulab shows would be another session's (or nobody's).
        "JUPYTER_PORT_RETRIES": "0",
    }


# --------------------------------------------------------------------------- argv builders


# How much of a container's output Docker keeps: json-file logs are otherwise unbounded,
# and a job printing every step for days fills /var/lib/docker, which stops every
# container on the node. gpulab shows only the tail (`docker_logs_script`: 2,000 lines,
# 64 KiB), so two 50 MB files keep far more than it reads while bounding each attempt
# (a finished container is kept GPULAB_FINISHED_ATTEMPT_KEEP_DAYS, for its exit code and
# logs) to 100 MB. The driver is named because these options are json-file's: a daemon
# whose default driver is journald or syslog would refuse them, and `docker logs` reads
# json-file on every Docker version.
DOCKER_LOG_OPTIONS = (
    "--log-driver", "json-file", "--log-opt", "max-size=50m", "--log-opt", "max-file=2",
)  # fmt: skip


def docker_run_argv(spec: LaunchSpec) -> list[str]:
    """`docker run -d` for one attempt: named, labelled, pinned to its GPUs, limited.

    `--init` makes Docker's tini (docker-init) the container's PID 1, and
    `TINI_KILL_PROCESS_GROUP` (read by tini 0.19, the one Docker ships, whatever its value)
    has it pass `docker stop`'s SIGTERM to the program's whole process group. Without
    it the signal reaches only PID 1: the program itself as PID 1 ignores a SIGTERM it
    has no handler for, and a shell as PID 1 neither dies nor passes it on, so the
    program never checkpoints and is killed at the end of the grace period. tini exits
    when the program it started does, which ends the container: a shell script should
    `exec` its program (or trap TERM) to give it the grace period.
    """
    launch_spec_check(spec)
    argv = [
        "docker", "run", "-d", "--init", *DOCKER_LOG_OPTIONS,
        "--name", spec.name,
        "--label", f"gpulab.job={spec.job_id}",
        "--label", f"gpulab.attempt={spec.attempt}",
    ]  # fmt: skip
    for key, value in sorted(spec.labels.items()):
        argv += ["--label", f"gpulab.{key}={value}"]
    if spec.device_uuids:
        # Docker parses --gpus as CSV: the quotes keep the comma-separated UUIDs one field.
        argv += ["--gpus", f'"device={",".join(spec.device_uuids)}"']
    if spec.cpus is not None:
        argv += ["--cpus", f"{spec.cpus:g}"]
    if spec.memory_mb is not None:
        argv += ["--memory", f"{spec.memory_mb}m"]
    if spec.session is not None:
        # The container's own network: the session's port is published on the node.
        port = spec.session[0]
        argv += ["--publish", f"{port}:{port}"]
    # Over any user value, as one --env (tini asks only whether the name is set).
    environment = {**job_environment(spec), "TINI_KILL_PROCESS_GROUP": "1"}
    for name, value in environment.items():
        if name in {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}:
            continue  # --gpus exposes exactly the devices, renumbered from 0 inside
        argv += ["--env", f"{name}={value}"]
    return [*argv, spec.image, *spec.command]


def apptainer_exec_argv(spec: LaunchSpec) -> list[str]:
    """`apptainer exec` for one attempt, run under the wrapper like a plain process.

    The environment reaches the container as `APPTAINERENV_<NAME>` variables of the
    apptainer process (see `process_argv`), not as `--env`, which splits on commas.
    """
    launch_spec_check(spec)
    return ["apptainer", "exec", "--nv", "--cleanenv", f"docker://{spec.image}", *spec.command]


def apptainer_environment(spec: LaunchSpec) -> dict[str, str]:
    return {f"APPTAINERENV_{name}": value for name, value in job_environment(spec).items()}


def process_argv(program: Sequence[str], environment: Mapping[str, str]) -> list[str]:
    """`env NAME=value ... PROGRAM ARGS...`: `env` sets the variables without a shell.

    A program name containing `=` would be read by `env` as one more variable, so it is
    refused rather than reinterpreted.
    """
    if "=" in program[0]:
        raise LaunchRefused(f"command: the program name {program[0]!r} may not contain '='.")
    return ["env", *(f"{name}={value}" for name, value in environment.items()), *program]


def wrapped_program(spec: LaunchSpec, runtime: str) -> list[str]:
    """The argv the wrapper runs, for the `process` and `apptainer` runtimes."""
    if runtime == "apptainer":
        return process_argv(apptainer_exec_argv(spec), apptainer_environment(spec))
    if runtime == "process":
        launch_spec_check(spec)
        return process_argv(spec.command, job_environment(spec))
    raise LaunchRefused(f"Runtime {runtime!r} does not run under the process wrapper.")


# --------------------------------------------------------------------------- shell scripts
# Each returns one command line for the node's login shell; every variable part is quoted.


def wrapped_launch_script(spec: LaunchSpec, runtime: str) -> str:
    """Create the run directory, start the wrapper detached, print its pid once written.

    The SSH channel returns at once because the wrapper's descriptors are all redirected;
    the loop waits (up to 5 s) for `pid` so a launch that could not even start is seen.
    """
    run_dir = shlex.quote(spec.run_dir)
    run_root = shlex.quote(spec.run_root)
    start = shlex.join(["setsid", "sh", "-c", WRAPPER, spec.name, *wrapped_program(spec, runtime)])
    # Idempotent: `mkdir` of the run directory is atomic, so of two deliveries of one
    # launch task only the first starts the program; the other just reports its pid.
    return (
        f"mkdir -p {run_root} && "
        f"if mkdir {run_dir} 2>/dev/null; then cd {run_dir} && "
        f"{{ {start} < /dev/null > /dev/null 2>&1 & }}; else cd {run_dir}; fi && "
        "for i in $(seq 50); do [ -s pid ] && break; sleep 0.1; done && cat pid"
    )


def wrapped_status_script(run_dir: str) -> str:
    """Prints `exited <code>`, `running <pid>`, `vanished` (killed before recording) or
    `unknown` (no such attempt here)."""
    d = shlex.quote(run_dir)
    return (
        f"if [ -s {d}/exit_code ]; then echo exited $(cat {d}/exit_code); "
        f"elif [ -s {d}/pid ]; then p=$(cat {d}/pid); "
        'if kill -0 "-$p" 2>/dev/null; then echo running "$p"; else echo vanished; fi; '
        "else echo unknown; fi"
    )


def stop_marker_script(run_dir: str) -> str:
    """Record on the node that a stop was sent; prints `first-stop` the first time only.

    So a redelivered stop (the worker died after the signal) does not take the exit the
    first stop caused for the program ending by itself.
    """
    d = shlex.quote(run_dir)
    return (
        f"mkdir -p {d} && if [ -e {d}/stop-sent ]; then echo again; "
        f"else : > {d}/stop-sent && echo first-stop; fi"
    )


def wrapped_stop_script(run_dir: str, grace_seconds: int) -> str:
    """SIGTERM the attempt's process group, wait up to the grace period, then SIGKILL.

    Prints the status afterwards (as `wrapped_status_script`), preceded by `was-exited`
    when the program had already ended before the first stop was sent (`program_exit`,
    written before the wrapper ends the program's leftovers and writes `exit_code`).
    """
    d = shlex.quote(run_dir)
    grace = int(grace_seconds)
    return (
        f"m=$({stop_marker_script(run_dir)}); "
        # exit_code too: attempts started by a wrapper older than program_exit.
        f'if [ "$m" = first-stop ] && {{ [ -s {d}/program_exit ] || [ -s {d}/exit_code ]; }}; '
        "then echo was-exited; fi; "
        f'if [ -s {d}/pid ]; then p=$(cat {d}/pid); kill -TERM "-$p" 2>/dev/null; '
        f'i=0; while [ $i -lt {grace * 10} ] && kill -0 "-$p" 2>/dev/null; '
        "do sleep 0.1; i=$((i+1)); done; "
        'kill -KILL "-$p" 2>/dev/null; '
        # Until init has reaped them, killed processes still answer kill -0.
        'j=0; while [ $j -lt 20 ] && kill -0 "-$p" 2>/dev/null; do sleep 0.1; j=$((j+1)); done; '
        "fi; " + wrapped_status_script(run_dir)
    )


def wrapped_stop_all_script(run_dirs: Sequence[str], grace_seconds: int) -> str:
    """`wrapped_stop_script` for several attempts at once: SIGTERM to every one, one
    grace period for all of them together, then SIGKILL to those still alive.

    So stopping n stale attempts takes one grace period, not n (and fits the poll's time
    limit). Prints nothing; the caller does not judge stale attempts' exits.
    """
    if not run_dirs:
        return "true"
    grace = int(grace_seconds)
    dirs = " ".join(shlex.quote(run_dir) for run_dir in run_dirs)
    alive = 'a=; for p in $ps; do kill -0 "-$p" 2>/dev/null && a="$a $p"; done'
    return (
        f'ps=; for d in {dirs}; do mkdir -p "$d" && : > "$d/stop-sent"; '
        '[ -s "$d/pid" ] || continue; p=$(cat "$d/pid"); ps="$ps $p"; '
        'kill -TERM "-$p" 2>/dev/null; done; '
        f"i=0; while [ $i -lt {grace * 10} ]; do {alive}; "
        '[ -z "$a" ] && break; sleep 0.1; i=$((i+1)); done; '
        'for p in $ps; do kill -KILL "-$p" 2>/dev/null; done; '
        f'j=0; while [ $j -lt 20 ]; do {alive}; [ -z "$a" ] && break; sleep 0.1; j=$((j+1)); '
        "done; true"
    )


def wrapped_logs_script(run_dir: str, stream: str, max_bytes: int) -> str:
    if stream not in {"stdout", "stderr"}:
        raise ValueError(f"stream must be stdout or stderr, not {stream!r}")
    path = shlex.quote(f"{run_dir}/{stream}")
    return f"tail -c {int(max_bytes)} {path} 2>/dev/null || true"


def wrapped_list_script(run_root: str) -> str:
    """One line per attempt directory whose process group is alive: `<name> <pid>`."""
    root = shlex.quote(run_root)
    return (
        f'for d in {root}/{CONTAINER_PREFIX}-*; do [ -s "$d/pid" ] || continue; '
        '[ -e "$d/exit_code" ] && continue; p=$(cat "$d/pid"); '
        'kill -0 "-$p" 2>/dev/null && echo "$(basename "$d") $p"; done; true'
    )


def kept_attempts_script(run_root: str, *, docker: bool) -> str:
    """One name per line: every attempt the node still keeps, running or not.

    The run directories (a `docker` node keeps only stop markers there), plus, on a
    `docker` node, every gpulab container that is not running (exited, dead, or left
    `created`). The database decides which of them are old enough to remove.
    """
    root = shlex.quote(run_root)
    # `${d##*/}`, not `basename`: a process per directory took 20 s for 20,000 of them.
    listed = (
        f'for d in {root}/{CONTAINER_PREFIX}-*; do [ -d "$d" ] && echo "${{d##*/}}"; done; true'
    )
    if not docker:
        return listed
    finished = shlex.join(
        [
            "docker", "ps", "-a", "--filter", "label=gpulab.job",
            "--filter", "status=exited", "--filter", "status=dead", "--filter", "status=created",
            "--format", "{{.Names}}",
        ]
    )  # fmt: skip
    return f"{listed}; {finished}"


def remove_attempts_script(run_root: str, names: Sequence[str], *, docker: bool) -> str:
    """Remove finished attempts: their run directories and, on `docker`, containers.

    Checked again on the node, so a name the database got wrong costs no running job:
    `docker rm` without `-f` refuses a running container (and its run directory, with
    its stop marker, then stays too), and a run directory whose process group is alive
    and has written no exit code is left alone.
    """
    if not names:
        return "true"
    for name in names:
        if parse_attempt_name(name) is None:
            raise ValueError(f"not an attempt name: {name!r}")
    root = run_root.rstrip("/")
    dirs = " ".join(shlex.quote(f"{root}/{name}") for name in names)
    if docker:
        # One `docker ps -a` after the `docker rm` says which containers are still there
        # (the refused ones): their run directories stay. Not one `docker inspect` per
        # name: 500 of them outlast the command's timeout. If docker cannot list, nothing
        # more is removed.
        remove = shlex.join(["docker", "rm", *names])
        still = shlex.join(
            ["docker", "ps", "-a", "--filter", "label=gpulab.job", "--format", "{{.Names}}"]
        )
        return (
            f'{remove} > /dev/null 2>&1; out=$({still}) || exit 0; left=" $(echo $out) "; '
            f'for d in {dirs}; do case "$left" in *" ${{d##*/}} "*) ;; *) rm -rf "$d" ;; esac; '
            "done; true"
        )
    return (
        f'for d in {dirs}; do if [ -s "$d/pid" ] && [ ! -e "$d/exit_code" ] && '
        'kill -0 "-$(cat "$d/pid")" 2>/dev/null; then continue; fi; rm -rf "$d"; done; true'
    )


def docker_launch_inspect_argv(name: str) -> list[str]:
    """Status, exit code and id: a launch needs all three to tell a started container
    from one that `docker run` left `created` when it could not start it."""
    return [
        "docker", "container", "inspect", "-f",
        "{{.State.Status}} {{.State.ExitCode}} {{.Id}}", name,
    ]  # fmt: skip


# How long a launch watches a container it has just started for tini's failure to start
# the program (`docker_launch_script`): tini fails within milliseconds of the start.
DOCKER_START_CHECK_TENTHS = 10


def docker_launch_script(spec: LaunchSpec) -> str:
    """Start the attempt's container unless it exists; print its id last.

    Idempotent like the wrapper: a redelivered launch reports the existing container,
    and the last look covers two deliveries at once (the one whose `docker run` loses
    the name to the other reports that container instead of failing the job).

    A container whose program never ran is no launch: it is removed and the launch
    fails with the error, so a mistyped command fails at once with the reason, not as
    a job that ran and exited 127 (a redelivery tries again). Two ways:

    - `docker run` created it but could not start it (OCI "create failed": Docker's
      init missing, a GPU the runtime cannot give): it stays `created` with a nonzero
      exit code, and `docker run`'s error is the message. `created` with exit code 0
      is another delivery's container between its create and its start, and counts as
      launched.
    - It started, but Docker's init (`--init`, tini) could not exec the program (not
      found: 127; not executable: 126): tini prints `[FATAL tini (N)] exec X failed:
      ...` and exits, and the container exits with it. `docker run -d` has succeeded
      by then, so the script watches the new container for up to
      DOCKER_START_CHECK_TENTHS tenths of a second: a nonzero exit whose log ends with
      tini's FATAL line is the failure, and that line the message. A program that ran
      and exited 127 itself (a shell's missing command) is the job's own exit.
    """
    name = spec.name
    inspect = shlex.join(docker_launch_inspect_argv(name))
    remove = shlex.join(["docker", "rm", "-f", name])
    last_line = shlex.join(docker_logs_argv(name, 1))
    run = shlex.join(docker_run_argv(spec))
    return (
        # never_ran STATUS CODE: the container's program never ran; says why on stderr
        # and removes it.
        'never_ran() { if [ "$1" = created ] && [ "$2" != 0 ]; then :; '
        'elif [ "$1" = exited ] && [ "$2" != 0 ]; then '
        f"l=$({last_line} 2>&1 | head -c 400); "
        'case "$l" in "[FATAL tini"*) echo "$l" >&2 ;; *) return 1 ;; esac; '
        "else return 1; fi; "
        f"{remove} > /dev/null 2>&1; }}; "
        f"launched() {{ s=$({inspect} 2>/dev/null) || return 1; set -- $s; "
        'never_ran "$1" "$2" && return 1; echo "$3"; }; '
        # A container that is still running is the program; give tini a moment to fail.
        f"started() {{ i=0; while [ $i -lt {DOCKER_START_CHECK_TENTHS} ]; do "
        f"s=$({inspect} 2>/dev/null) || return 0; set -- $s; "
        '[ "$1" = running ] || break; sleep 0.1; i=$((i+1)); done; '
        'if never_ran "$1" "$2"; then exit "$2"; fi; }; '
        f"launched || {{ {run} || {{ code=$?; launched || exit $code; }}; started; }}"
    )


def docker_status_argv(name: str) -> list[str]:
    return ["docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name]


def docker_stop_argv(name: str, grace_seconds: int) -> list[str]:
    return docker_stop_all_argv([name], grace_seconds)


def docker_stop_all_argv(names: Sequence[str], grace_seconds: int) -> list[str]:
    # docker stops the containers named in parallel: one grace period for all of them.
    return ["docker", "stop", "-t", str(int(grace_seconds)), *names]


def docker_logs_argv(name: str, max_lines: int) -> list[str]:
    return ["docker", "logs", "--tail", str(int(max_lines)), name]


def docker_logs_script(name: str, stream: str, max_lines: int, max_bytes: int) -> str:
    """One stream of `docker logs`, its last `max_bytes` cut on the node (as `tail -c`
    does for the wrapper's files), so a flood of output never crosses the network.

    docker logs replays the container's stdout on 1 and stderr on 2; the other is
    dropped. Docker's own complaints (no such container) go to the stderr stream.
    """
    if stream not in {"stdout", "stderr"}:
        raise ValueError(f"stream must be stdout or stderr, not {stream!r}")
    logs = shlex.join(docker_logs_argv(name, max_lines))
    keep = "2>/dev/null" if stream == "stdout" else "2>&1 >/dev/null"
    return f"{logs} {keep} | tail -c {int(max_bytes)}"


# `archived_logs_script` exits with this when the node no longer has the attempt.
ATTEMPT_NOT_ON_NODE = 3


def archived_logs_script(
    *, name: str, run_dir: str, stream: str, max_bytes: int, docker: bool
) -> str:
    """One stream of an ended attempt's log, its last `max_bytes`, to keep in the database.

    Unlike a live read, a missing attempt is told apart from an empty log: exit
    ATTEMPT_NOT_ON_NODE when the run directory (or, on `docker`, the container) is gone,
    so the copy says "not found" rather than keeping an empty log, or Docker's complaint
    as the job's stderr. Any other failure (the daemon not answering) exits non-zero too,
    and the copy is tried again later.
    """
    if docker:
        if parse_attempt_name(name) is None:
            raise ValueError(f"not an attempt name: {name!r}")
        if stream not in {"stdout", "stderr"}:
            raise ValueError(f"stream must be stdout or stderr, not {stream!r}")
        inspect = shlex.join(["docker", "container", "inspect", "--format", ".", name])
        logs = shlex.join(docker_logs_argv(name, 2000))
        keep = "2>/dev/null" if stream == "stdout" else "2>&1 >/dev/null"
        # `docker logs`' own status, not the pipeline's (tail's): a log Docker cannot read
        # (a json-file log corrupted by a full disk) fails the copy, to be tried again,
        # rather than keeping Docker's complaint as the job's stderr. Without pipefail,
        # which dash lacks: the status leaves the pipe on fd 3, the log on fd 4.
        return (
            f'err=$({inspect} 2>&1 >/dev/null) || {{ case "$err" in '
            f'*"No such"*) exit {ATTEMPT_NOT_ON_NODE} ;; *) echo "$err" >&2; exit 1 ;; esac; }}; '
            f"{{ status=$( {{ {{ {logs} {keep}; echo $? >&3; }} | tail -c {int(max_bytes)} >&4; "
            '} 3>&1 ); } 4>&1; [ "$status" = 0 ] || { echo "docker logs failed" >&2; exit 1; }'
        )
    quoted = shlex.quote(run_dir)
    return f"[ -d {quoted} ] || exit {ATTEMPT_NOT_ON_NODE}; " + wrapped_logs_script(
        run_dir, stream, max_bytes
    )


def docker_list_argv() -> list[str]:
    return [
        "docker", "ps", "--filter", "label=gpulab.job", "--format", "{{.Names}}",
    ]  # fmt: skip
