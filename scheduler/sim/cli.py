"""The simulator's command line, shared by `python -m scheduler.sim` and `manage.py simulate`.

One argparse definition (`add_arguments`) serves both entry points; `run(options)` does
the work and never touches a database, so the Django command is a thin wrapper.

Examples::

    python -m scheduler.sim --trace scheduler/data/tiresias_60_job.csv \\
        --cluster 1,2,4,128,256 --policy fifo,las,srtf,srsf --tiresias-reference
    python -m scheduler.sim --trace 60_job.csv --cluster n32g4.csv --policy las --policy srsf \\
        --restore-cost 30 --json out.json --plot out.html
    python -m scheduler.sim --generate philly --jobs 2000 --load 1.3 --cluster 1,8,8,64,256 \\
        --policy las,srsf
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from scheduler.core.types import PlacementKind, SchedulerSettings
from scheduler.sim.clusters import SimCluster, load_cluster
from scheduler.sim.engine import (
    ReplayError,
    SimConfig,
    SimResult,
    bind_to_cluster,
    simulate,
    unplaceable_jobs,
)
from scheduler.sim.metrics import json_safe, summarize
from scheduler.sim.traces import TraceError, TraceJob, load_tiresias_trace, scale_durations

POLICIES = ("fifo", "fifo-backfill", "las", "gittins", "srtf", "srsf")
# Names the Tiresias simulator (and its paper) use, mapped to gpulab's registry.
ALIASES = {
    "yarn-cs": "fifo",
    "fjf": "fifo-backfill",
    "2d-las": "las",
    "dlas": "las",
    "dlas-gpu": "las",
    "2d-gittins": "gittins",
    "dlas-gpu-gittins": "gittins",
    "shortest": "srtf",
    "shortest-gpu": "srsf",
}
# The public Tiresias simulator's setting (run_sim.py, jobs.py): 3 queues at 3250 and
# 7200 GPU·s, no starvation promotion, free preemption, `count` placement, decisions
# exactly at events and queue crossings, plain FIFO order inside a queue.
REFERENCE = {
    "queues": (3250.0, 7200.0),
    "knob": None,
    "restore_cost": 0.0,
    "min_runtime": 0.0,
    "fairness": 0.0,
    "tick": 0.0,
    "placement": PlacementKind.GPU_COUNT,
    # Tiresias preempts at once, any lower queue, any number of victims, no guard.
    "patience": 0.0,
    "margin": 1,
    "max_victims": 0,
    "starvation": 0.0,
}


class UsageError(ValueError):
    """Bad command-line options (reported without a traceback)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option of the simulator (used by both entry points)."""
    source = parser.add_argument_group("input")
    source.add_argument("--trace", help="Tiresias-format job trace (CSV)")
    source.add_argument(
        "--generate",
        choices=("philly",),
        help="instead of --trace: generate a contended Philly-like trace (generators.py)",
    )
    source.add_argument("--jobs", type=int, default=2000, help="jobs to generate [2000]")
    source.add_argument("--load", type=float, default=1.2, help="generated offered load [1.2]")
    source.add_argument("--seed", type=int, default=0, help="generator seed [0]")
    source.add_argument(
        "--cluster",
        required=True,
        help="Tiresias spec CSV, an inline spec row like 1,2,4,128,256, "
        "or a heterogeneous cluster JSON",
    )
    source.add_argument(
        "--duration-scale",
        type=float,
        default=1.0,
        help="multiply every job duration (e.g. 10 for 60_job x 10) [1]",
    )
    sched = parser.add_argument_group("scheduling")
    sched.add_argument(
        "--policy",
        action="append",
        help=f"policy, repeatable or comma-separated: {', '.join(POLICIES)} "
        "(aliases: dlas-gpu, shortest, shortest-gpu, ...); NAME@PLACEMENT picks a placement "
        "per policy, e.g. las@allox [las]",
    )
    sched.add_argument(
        "--placement",
        choices=[kind.value for kind in PlacementKind],
        help="placement for policies without @PLACEMENT "
        "[best-fit on one device type, allox on several; gpu-count in reference mode]",
    )
    sched.add_argument(
        "--restore-cost",
        type=float,
        help="seconds of lost service per resume from checkpoint [30; reference 0]",
    )
    sched.add_argument(
        "--queues",
        help="queue thresholds in GPU·s, comma-separated, e.g. 3600 or 3250,7200 "
        "[3600·2^i, i = 0..10; reference 3250,7200]",
    )
    sched.add_argument(
        "--knob",
        help="starvation promotion knob (PROMOTEKNOB): a float, or 'off' [4; reference off]",
    )
    sched.add_argument(
        "--patience",
        type=float,
        help="seconds a waiting job waits before it may preempt [600; reference 0]",
    )
    sched.add_argument(
        "--margin",
        type=int,
        help="a job preempts only jobs at least this many queues below it [3; reference 1]",
    )
    sched.add_argument(
        "--max-victims",
        type=int,
        help="running jobs one waiting job may preempt, 0 = any [1; reference 0]",
    )
    sched.add_argument(
        "--starvation",
        type=float,
        help="seconds pending before the starvation guard protects a multi-GPU job, 0 = off "
        "[3600; reference 0]",
    )
    sched.add_argument(
        "--efficiency-gate",
        type=float,
        help="AlloX placement under a queue: a waiting job only takes device types where it "
        "makes at least this share of its best value at the queue's prices, 0 = off [1]",
    )
    sched.add_argument(
        "--min-runtime",
        type=float,
        help="seconds a job runs before it may be preempted [300; reference 0]",
    )
    sched.add_argument(
        "--fairness", type=float, help="fair-share strength in [0, 1] [1; reference 0]"
    )
    sched.add_argument(
        "--tick",
        type=float,
        help="timer period in seconds; timer decisions land on its multiples [10; reference 0]",
    )
    sched.add_argument(
        "--tiresias-reference",
        action="store_true",
        help="the public Tiresias simulator's setting: queues 3250,7200 GPU·s, knob off, "
        "restore cost 0, min runtime 0, fairness 0, gpu-count placement, exact timing",
    )
    out = parser.add_argument_group("output")
    out.add_argument("--json", metavar="OUT", help="write metrics per policy as JSON")
    out.add_argument("--plot", metavar="OUT.html", help="write a Plotly report (JCT CDF, GPUs)")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    out.add_argument(
        "--no-check",
        action="store_true",
        help="skip the invariant check of every round (faster; for benchmarks)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler.sim",
        description="Replay a job trace through gpulab's scheduling policies.",
    )
    add_arguments(parser)
    return parser


@dataclass(frozen=True)
class Experiment:
    """Everything resolved from the options: what to run, on what."""

    trace: list[TraceJob]
    cluster: SimCluster
    runs: list[tuple[str, SchedulerSettings]]  # (label, settings)
    config: SimConfig
    description: dict[str, object]


def parse_policies(values: Sequence[str] | None) -> list[tuple[str, PlacementKind | None]]:
    """`["las,srsf", "las@allox"]` -> [("las", None), ("srsf", None), ("las", ALLOX)]."""
    items = []
    for value in values or ["las"]:
        for raw in value.split(","):
            name = raw.strip().lower()
            if not name:
                continue
            placement = None
            if "@" in name:
                name, _, where = name.partition("@")
                try:
                    placement = PlacementKind(where)
                except ValueError:
                    choices = ", ".join(k.value for k in PlacementKind)
                    raise UsageError(
                        f"--policy {raw!r}: placement must be one of {choices}"
                    ) from None
            name = ALIASES.get(name, name)
            if name not in POLICIES:
                raise UsageError(f"--policy {raw!r}: unknown policy; choose from {POLICIES}")
            items.append((name, placement))
    if not items:
        raise UsageError("--policy: no policy given")
    return items


def parse_thresholds(value: str) -> tuple[float, ...]:
    try:
        thresholds = tuple(float(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"--queues {value!r}: thresholds must be numbers (GPU·s)") from None
    if any(not math.isfinite(t) or t <= 0 for t in thresholds):
        raise UsageError(f"--queues {value!r}: thresholds must be > 0")
    if list(thresholds) != sorted(set(thresholds)):
        raise UsageError(f"--queues {value!r}: thresholds must increase")
    return thresholds


def parse_knob(value: str) -> float | None:
    if value.strip().lower() in {"off", "none", "0", "0.0"}:
        return None
    try:
        knob = float(value)
    except ValueError:
        raise UsageError(f"--knob {value!r}: a number or 'off'") from None
    if not math.isfinite(knob) or knob < 0:
        raise UsageError(f"--knob {value!r}: must be >= 0")
    return knob


def resolve(options: argparse.Namespace) -> Experiment:
    """Options -> trace, cluster, settings per run (reference mode fills its defaults)."""
    if bool(options.trace) == bool(options.generate):
        raise UsageError("give exactly one of --trace or --generate")
    _check_numbers(options)
    for flag, value in (("--json", options.json), ("--plot", options.plot)):
        if value == "-":
            # stdout carries the table; a file named "-" is never what was meant.
            raise UsageError(f"{flag} -: writing to stdout is not supported; give a file name")
        if value:
            _check_writable(flag, Path(value))
    cluster = load_cluster(options.cluster)
    if options.trace:
        trace = load_tiresias_trace(options.trace)
        source = str(options.trace)
    else:
        from scheduler.sim.generators import philly_like

        trace = philly_like(options.jobs, cluster.num_gpus, load=options.load, seed=options.seed)
        source = f"philly-like jobs={options.jobs} load={options.load} seed={options.seed}"
    if options.duration_scale != 1.0:
        trace = scale_durations(trace, options.duration_scale)
    unplaceable = unplaceable_jobs((bind_to_cluster(job, cluster) for job in trace), cluster)
    if unplaceable:
        job, most = unplaceable[0]
        raise UsageError(
            f"{len(unplaceable)} job(s) can never be placed on this cluster, e.g. job {job.id}: "
            f"it needs {job.num_gpus} GPUs ({job.consolidation.value} consolidation), and one "
            f"device type it can run on offers at most {most} (a job never spans types)"
        )

    reference = bool(options.tiresias_reference)
    base = SchedulerSettings()

    def pick(value: object, ref_value: object, default: object) -> object:
        if value is not None:
            return value
        return ref_value if reference else default

    thresholds = (
        parse_thresholds(options.queues)
        if options.queues
        else (REFERENCE["queues"] if reference else base.queue_thresholds)
    )
    knob = (
        parse_knob(options.knob)
        if options.knob is not None
        else (REFERENCE["knob"] if reference else base.promote_knob)
    )
    restore_cost = float(pick(options.restore_cost, REFERENCE["restore_cost"], 30.0))
    min_runtime = float(pick(options.min_runtime, REFERENCE["min_runtime"], base.min_runtime))
    fairness = float(pick(options.fairness, REFERENCE["fairness"], base.fairness))
    tick = float(pick(options.tick, REFERENCE["tick"], 10.0))
    patience = float(pick(options.patience, REFERENCE["patience"], base.preempt_patience))
    margin = int(pick(options.margin, REFERENCE["margin"], base.preempt_margin))
    max_victims = int(pick(options.max_victims, REFERENCE["max_victims"], base.max_victims))
    starvation = float(pick(options.starvation, REFERENCE["starvation"], base.starvation_seconds))
    if restore_cost < 0 or min_runtime < 0 or tick < 0:
        raise UsageError("--restore-cost, --min-runtime and --tick must be >= 0")
    if patience < 0 or starvation < 0 or max_victims < 0:
        raise UsageError("--patience, --starvation and --max-victims must be >= 0")
    if margin < 1:
        raise UsageError("--margin must be >= 1")
    gate = float(
        pick(options.efficiency_gate, base.allox_efficiency_gate, base.allox_efficiency_gate)
    )
    if not 0.0 <= gate <= 1.0:
        raise UsageError("--efficiency-gate must be in [0, 1]")
    if not 0.0 <= fairness <= 1.0:
        raise UsageError("--fairness must be in [0, 1]")
    if options.placement:
        default_placement = PlacementKind(options.placement)
    elif reference:
        default_placement = REFERENCE["placement"]
    else:
        default_placement = PlacementKind.ALLOX if cluster.heterogeneous else PlacementKind.BEST_FIT

    runs = []
    for name, placement in parse_policies(options.policy):
        chosen = placement or default_placement
        settings = SchedulerSettings(
            policy=name,
            placement=chosen,
            queue_thresholds=thresholds,  # type: ignore[arg-type]
            promote_knob=knob,  # type: ignore[arg-type]
            fairness=fairness,
            min_runtime=min_runtime,
            restore_cost=restore_cost,
            preempt_patience=patience,
            preempt_margin=margin,
            max_victims=max_victims,
            starvation_seconds=starvation,
            allox_efficiency_gate=gate,
        )
        label = name if placement is None else f"{name}@{chosen.value}"
        if any(existing == label for existing, _ in runs):
            continue
        runs.append((label, settings))
    config = SimConfig(
        tick=tick,
        check_invariants=not options.no_check,
        progress=not options.no_progress,
    )
    description = {
        "trace": source,
        "jobs": len(trace),
        "duration_scale": options.duration_scale,
        "cluster": cluster.describe(),
        "cluster_spec": str(options.cluster),
        "mode": "tiresias-reference" if reference else "default",
        "restore_cost": restore_cost,
        "queue_thresholds": list(thresholds),
        "promote_knob": knob,
        "min_runtime": min_runtime,
        "fairness": fairness,
        "tick": tick,
        "preempt_patience": patience,
        "preempt_margin": margin,
        "max_victims": max_victims,
        "starvation_seconds": starvation,
        "allox_efficiency_gate": gate,
    }
    return Experiment(trace, cluster, runs, config, description)


# Options that must be finite (NaN compares false with every bound, and an infinite
# duration or restore cost never completes): (attribute, flag, smallest allowed, inclusive).
FINITE_OPTIONS = (
    ("load", "--load", 0.0, False),
    ("duration_scale", "--duration-scale", 0.0, False),
    ("restore_cost", "--restore-cost", 0.0, True),
    ("patience", "--patience", 0.0, True),
    ("starvation", "--starvation", 0.0, True),
    ("efficiency_gate", "--efficiency-gate", 0.0, True),
    ("min_runtime", "--min-runtime", 0.0, True),
    ("fairness", "--fairness", 0.0, True),
    ("tick", "--tick", 0.0, True),
)


def _check_numbers(options: argparse.Namespace) -> None:
    """Refuse NaN, infinities and out-of-range values before anything runs."""
    for attribute, flag, lowest, inclusive in FINITE_OPTIONS:
        value = getattr(options, attribute, None)
        if value is None:
            continue
        bound_ok = value >= lowest if inclusive else value > lowest
        if not math.isfinite(value) or not bound_ok:
            relation = ">=" if inclusive else ">"
            raise UsageError(f"{flag} must be a finite number {relation} {lowest:g}, got {value}")
    if options.generate and options.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {options.jobs}")


def _check_writable(flag: str, path: Path) -> None:
    """Fail before a long replay, not after it, when an output cannot be written."""
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # the write would make it anyway
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot create {exc.filename}: {exc.strerror}") from None
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{flag} {path}: not writable")


def run_experiment(experiment: Experiment) -> dict[str, SimResult]:
    results: dict[str, SimResult] = {}
    for label, settings in experiment.runs:
        config = SimConfig(
            tick=experiment.config.tick,
            check_invariants=experiment.config.check_invariants,
            progress=experiment.config.progress,
            progress_desc=label,
        )
        results[label] = simulate(experiment.trace, experiment.cluster, settings, config=config)
    return results


def report(results: dict[str, SimResult], description: dict[str, object]) -> dict[str, object]:
    """The `--json` document."""
    return {
        "policies": {label: summarize(result) for label, result in results.items()},
        "meta": description,
    }


def format_table(document: dict[str, object]) -> str:
    """A fixed-width table of the headline metrics, one row per policy."""
    header = (
        f"{'policy':<18}{'done':>6}{'avg JCT':>11}{'median':>10}{'p95':>11}{'p99':>11}"
        f"{'avg wait':>11}{'makespan':>11}{'util':>7}{'preempt':>9}{'jain':>7}"
    )
    lines = [header, "-" * len(header)]
    policies = document["policies"]
    assert isinstance(policies, dict)
    for label, m in policies.items():
        lines.append(
            f"{label:<18}{m['jobs_finished']:>6}{_num(m['avg_jct']):>11}"
            f"{_num(m['median_jct']):>10}{_num(m['p95_jct']):>11}{_num(m['p99_jct']):>11}"
            f"{_num(m['avg_queueing_delay']):>11}{_num(m['makespan']):>11}"
            f"{_num(m['gpu_utilization'], 3):>7}{m['preemptions']:>9}"
            f"{_num(m['jain_fairness'], 3):>7}"
        )
        if m.get("stop_reason") != "all jobs finished":
            lines.append(f"  ! {label}: {m.get('stop_reason')}")
    gpu_sizes = sorted(
        {int(n) for m in policies.values() for n in m["by_num_gpu"]}  # type: ignore[union-attr]
    )
    if gpu_sizes:
        lines.append("")
        lines.append(
            f"{'avg JCT by GPUs':<18}" + "".join(f"{str(n) + ' GPU':>11}" for n in gpu_sizes)
        )
        for label, m in policies.items():
            by = m["by_num_gpu"]
            cells = "".join(
                f"{_num(by[str(n)]['avg_jct']) if str(n) in by else '-':>11}" for n in gpu_sizes
            )
            lines.append(f"{label:<18}{cells}")
    return "\n".join(lines)


def _num(value: object, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def run(options: argparse.Namespace, out: TextIO = sys.stdout) -> dict[str, object]:
    """Run the simulator for parsed `options`; write --json/--plot; print the table.

    The files are written before the table so that a reader that closes stdout early
    (`| head`) cannot cost them; a closed stdout silences the rest of the output (`_say`).
    Raises `ReplayError` when a replay cannot finish (e.g. it stalls).
    """
    experiment = resolve(options)
    d = experiment.description
    _say(
        out,
        f"trace: {d['trace']} ({d['jobs']} jobs, durations x{d['duration_scale']:g}); "
        f"cluster: {d['cluster']}; mode: {d['mode']}; restore cost {d['restore_cost']:g} s; "
        f"queues {d['queue_thresholds']} GPU·s; knob {d['promote_knob']}; "
        f"min runtime {d['min_runtime']:g} s; tick {d['tick']:g} s",
    )
    results = run_experiment(experiment)
    document = report(results, experiment.description)
    written = []
    try:
        if options.json:
            path = Path(options.json)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(json_safe(document), indent=2) + "\n", encoding="utf-8")
            written.append(path)
        if options.plot:
            from scheduler.sim.plot import write_plot

            path = Path(options.plot)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_plot(results, path, title=f"{d['trace']} on {d['cluster']}")
            written.append(path)
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename}: {exc.strerror or exc}") from None
    _say(out, format_table(document))
    # Wall time is printed, not stored: the --json document depends only on the inputs.
    timings = ", ".join(f"{label} {result.wall_seconds:.1f} s" for label, result in results.items())
    _say(out, f"simulated in: {timings}")
    for path in written:
        _say(out, f"wrote {path}")
    return document


def stuck_policies(document: dict[str, object]) -> list[str]:
    """Labels of the runs that stopped with jobs nothing could start (exit status 1)."""
    return [label for label, reason in _stop_reasons(document) if reason.startswith("stuck")]


def stalled_runs(document: dict[str, object]) -> list[str]:
    """'<label>: replay stalled at ...' for each run the stall guard stopped (exit status 1;
    the other runs' results are still written)."""
    prefix = "stalled: "
    return [
        f"{label}: {reason.removeprefix(prefix)}"
        for label, reason in _stop_reasons(document)
        if reason.startswith(prefix)
    ]


def _stop_reasons(document: dict[str, object]) -> list[tuple[str, str]]:
    policies = document["policies"]
    assert isinstance(policies, dict)
    return [(label, str(metrics.get("stop_reason", ""))) for label, metrics in policies.items()]


def _say(out: TextIO, text: str) -> None:
    # One write per message: Django's OutputWrapper appends its own newline to each write.
    try:
        out.write(text + "\n")
        out.flush()
    except BrokenPipeError:
        # The reader left (`| head`): what it did not read is not wanted, but the replay and
        # its --json/--plot files still are. Point stdout at devnull, as the Python docs
        # advise (library/signal, "Note on SIGPIPE"), so later writes and the interpreter's
        # final flush do not fail again.
        _silence_stdout()


def _silence_stdout() -> None:
    try:
        fileno = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's capture): nothing to redirect
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fileno)
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    options = parser.parse_args(argv)
    try:
        document = run(options)
    except (UsageError, TraceError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    except ReplayError as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")
    for stalled in stalled_runs(document):
        sys.stderr.write(f"{parser.prog}: error: {stalled}\n")
    stuck = stuck_policies(document)
    if stuck:
        parser.exit(1, f"{parser.prog}: {', '.join(stuck)} left jobs that never ran\n")
    if stalled_runs(document):
        parser.exit(1)
    return 0
