"""The command line: JSON schema, plot, errors, and both entry points end to end."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.sim.cli import UsageError, build_parser, main, parse_policies, resolve, run
from scheduler.sim.metrics import REQUIRED_KEYS

REPO = Path(__file__).resolve().parents[3]
TRACE_ROWS = (
    "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
    "0,1,0,0,vgg16,100,10\n1,2,10,0,resnet50,50,10\n2,1,20,0,alexnet,30,0\n"
)


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.csv"
    path.write_text(TRACE_ROWS)
    return path


def test_json_output_has_the_issue_schema_for_every_policy(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    plot = tmp_path / "out.html"
    code = main(
        [
            "--trace", str(trace), "--cluster", "1,1,2,8,64",
            "--policy", "fifo,las", "--policy", "srsf",
            "--json", str(out), "--plot", str(plot), "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0
    document = json.loads(out.read_text())
    assert list(document["policies"]) == ["fifo", "las", "srsf"]
    fifo = document["policies"]["fifo"]
    assert set(REQUIRED_KEYS) <= set(fifo)
    assert fifo["jobs_finished"] == 3
    assert fifo["avg_jct"] == pytest.approx((100 + 140 + 160) / 3)
    assert fifo["by_num_gpu"] == {
        "1": {"count": 2, "avg_jct": 130.0},
        "2": {"count": 1, "avg_jct": 140.0},
    }
    assert fifo["makespan"] == 180
    assert fifo["gpu_utilization"] == pytest.approx((100 + 100 + 30) / (2 * 180))
    assert document["meta"]["restore_cost"] == 30
    assert "plotly" in plot.read_text()[:5000].lower()


def test_reference_mode_sets_the_tiresias_setting_and_flags_override_it(trace: Path) -> None:
    args = ["--trace", str(trace), "--cluster", "1,1,2,8,64", "--tiresias-reference"]
    settings = resolve(build_parser().parse_args(args)).runs[0][1]
    assert settings.queue_thresholds == (3250.0, 7200.0)
    assert settings.promote_knob is None
    assert settings.restore_cost == 0 and settings.min_runtime == 0
    assert settings.placement.value == "gpu-count"
    override = resolve(build_parser().parse_args([*args, "--restore-cost", "30", "--knob", "8"]))
    gate = resolve(build_parser().parse_args([*args, "--efficiency-gate", "0.5"]))
    assert gate.runs[0][1].allox_efficiency_gate == 0.5
    assert override.runs[0][1].restore_cost == 30
    assert override.runs[0][1].promote_knob == 8


def test_policy_names_accept_aliases_and_per_policy_placement() -> None:
    assert parse_policies(["dlas-gpu,shortest-gpu", "las@allox"]) == [
        ("las", None),
        ("srsf", None),
        ("las", parse_policies(["las@allox"])[0][1]),
    ]
    with pytest.raises(UsageError, match="unknown policy"):
        parse_policies(["tetris"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--queues", "7200,3600"], "thresholds must increase"),
        (["--knob", "lots"], "a number or 'off'"),
        (["--cluster", "1,1,1,8,64"], "can never be placed on this cluster, e.g. job 1"),
        (["--efficiency-gate", "1.5"], "--efficiency-gate must be in [0, 1]"),
        # NaN passes every `< 0` check, and an infinite duration or restore never ends:
        # both once hung the replay or changed results silently.
        (["--duration-scale", "nan"], "--duration-scale must be a finite number > 0"),
        (["--restore-cost", "inf"], "--restore-cost must be a finite number >= 0, got inf"),
        (["--tick", "nan"], "--tick must be a finite number"),
        (["--starvation", "nan"], "--starvation must be a finite number"),
        (["--min-runtime", "-1"], "--min-runtime must be a finite number >= 0"),
        (["--fairness", "2"], "--fairness must be in [0, 1]"),
    ],
)
def test_bad_options_exit_with_a_clear_message(
    trace: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--trace", str(trace), "--cluster", "1,1,2,8,64", "--no-progress", *extra]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jobs", "0"], "--jobs must be >= 1, got 0"),
        (["--load", "0"], "--load must be a finite number > 0"),
        (["--load", "inf"], "--load must be a finite number > 0, got inf"),
    ],
)
def test_bad_generator_options_exit_with_a_clear_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--generate", "philly", "--cluster", "1,1,2,8,64", "--no-progress", *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_an_unwritable_output_fails_before_the_replay(
    trace: Path, tmp_path: Path, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for target, message in ((tmp_path, "is a directory"), (blocker / "x.json", "cannot create")):
        with pytest.raises(SystemExit) as exit_info:
            main(["--trace", str(trace), "--cluster", "1,1,2,8,64", flag, str(target)])
        assert exit_info.value.code == 2
        err = capsys.readouterr()
        assert message in err.err
        assert "avg JCT" not in err.out  # refused before anything was simulated


def hetero_cluster(tmp_path: Path, throughputs: dict[str, dict[str, float]]) -> Path:
    path = tmp_path / "hz.json"
    path.write_text(
        json.dumps(
            {
                "device_types": {"v100": 1.0, "k80": 0.5},
                "nodes": [
                    {"name": "v", "device_type": "v100", "gpus": 1},
                    {"name": "k", "device_type": "k80", "gpus": 1},
                ],
                "throughputs": throughputs,
            }
        )
    )
    return path


def test_a_job_that_fits_the_cluster_but_no_single_type_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "two.csv"
    trace.write_text(TRACE_ROWS.splitlines()[0] + "\n0,2,0,0,vgg19,100,0\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["--trace", str(trace), "--cluster", str(hetero_cluster(tmp_path, {}))])
    assert exit_info.value.code == 2
    assert (
        "needs 2 GPUs (preferred consolidation), and one device type it can run on offers "
        "at most 1" in capsys.readouterr().err
    )


def test_a_zero_throughput_type_is_one_the_job_never_runs_on(tmp_path: Path) -> None:
    # vgg19 cannot run on the k80: it must wait for the v100, not sit on the k80 for ever.
    trace = tmp_path / "z.csv"
    trace.write_text(TRACE_ROWS.splitlines()[0] + "\n0,1,0,0,resnet,100,0\n1,1,0,0,vgg19,100,0\n")
    cluster = hetero_cluster(tmp_path, {"vgg19": {"v100": 1.0, "k80": 0.0}})
    out = tmp_path / "z.json"
    code = main(
        ["--trace", str(trace), "--cluster", str(cluster), "--policy", "fifo@best-fit",
         "--json", str(out), "--no-progress"]
    )  # fmt: skip
    assert code == 0
    fifo = json.loads(out.read_text())["policies"]["fifo@best-fit"]
    assert fifo["jobs_finished"] == 2
    assert fifo["stop_reason"] == "all jobs finished"


def test_a_replay_that_leaves_jobs_unstarted_exits_with_status_1(
    trace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stuck = {"policies": {"las": {"stop_reason": "stuck: 1 job(s) wait and nothing can start"}}}
    monkeypatch.setattr("scheduler.sim.cli.run", lambda options: stuck)
    with pytest.raises(SystemExit) as exit_info:
        main(["--trace", str(trace), "--cluster", "1,1,2,8,64"])
    assert exit_info.value.code == 1
    assert "las left jobs that never ran" in capsys.readouterr().err


def test_the_json_document_depends_only_on_the_inputs(trace: Path, tmp_path: Path) -> None:
    outputs = [tmp_path / "a.json", tmp_path / "b.json"]
    for out in outputs:
        args = ["--trace", str(trace), "--cluster", "1,1,2,8,64", "--policy", "las,srsf"]
        assert main([*args, "--json", str(out), "--no-progress"]) == 0
    assert outputs[0].read_bytes() == outputs[1].read_bytes()


def test_python_dash_m_runs_end_to_end(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    completed = subprocess.run(
        [sys.executable, "-m", "scheduler.sim", "--trace", str(trace), "--cluster",
         "1,1,2,8,64", "--policy", "las", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert "avg JCT" in completed.stdout
    assert json.loads(out.read_text())["policies"]["las"]["jobs_finished"] == 3


def test_the_django_command_runs_without_a_database(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmd.json"
    # Settings with no DATABASES at all: the command must not need one.
    script = (
        "import django; from django.conf import settings; "
        "settings.configure(INSTALLED_APPS=['scheduler'], DATABASES={}); django.setup(); "
        "from django.core.management import call_command; "
        f"call_command('simulate', trace={str(trace)!r}, cluster='1,1,2,8,64', "
        f"policy=['fifo'], json={str(out)!r}, no_progress=True)"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    completed = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert "fifo" in completed.stdout
    assert json.loads(out.read_text())["policies"]["fifo"]["avg_jct"] == pytest.approx(400 / 3)


SWAP_ROWS = (
    "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
    "0,2,0,0,m,400,0\n1,2,0,0,m,100,0\n2,2,0,0,m,3000,0\n"
)
# Resuming costs 30 s x 2 GPUs = 60 GPU·s, above the 50 GPU·s queue: the replay stalls.
SWAP_ARGS = [
    "--cluster", "1,1,2,1,1", "--policy", "las", "--tiresias-reference",
    "--restore-cost", "30", "--queues", "50", "--knob", "2", "--no-progress",
]  # fmt: skip


def test_a_stalled_replay_exits_with_status_1_and_the_remedy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "swap.csv"
    trace.write_text(SWAP_ROWS)
    with pytest.raises(SystemExit) as exit_info:
        main(["--trace", str(trace), *SWAP_ARGS])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "replay stalled" in err
    assert "--min-runtime well above the restore cost" in err
    assert "Traceback" not in err


def test_a_stall_keeps_the_other_policies_results(tmp_path: Path) -> None:
    trace = tmp_path / "swap.csv"
    trace.write_text(SWAP_ROWS)
    out = tmp_path / "out.json"
    args = [arg if arg != "las" else "fifo,las" for arg in SWAP_ARGS]
    with pytest.raises(SystemExit) as exit_info:
        main(["--trace", str(trace), *args, "--json", str(out)])
    assert exit_info.value.code == 1
    policies = json.loads(out.read_text())["policies"]
    assert policies["fifo"]["jobs_finished"] == 3
    assert policies["las"]["stop_reason"].startswith("stalled: ")


def test_the_django_command_reports_a_stalled_replay_as_a_command_error(tmp_path: Path) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    trace = tmp_path / "swap.csv"
    trace.write_text(SWAP_ROWS)
    with pytest.raises(CommandError, match="replay stalled") as error:
        call_command("simulate", "--trace", str(trace), *SWAP_ARGS, stdout=io.StringIO())
    assert error.value.returncode == 1


@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_a_dash_output_is_refused_instead_of_writing_a_file_named_dash(
    trace: Path,
    flag: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # where a file named "-" would land
    with pytest.raises(SystemExit) as exit_info:
        main(["--trace", str(trace), "--cluster", "1,1,2,8,64", flag, "-"])
    assert exit_info.value.code == 2
    assert f"{flag} -: writing to stdout is not supported" in capsys.readouterr().err
    assert not (tmp_path / "-").exists()


def test_the_output_files_exist_before_the_table_is_printed(trace: Path, tmp_path: Path) -> None:
    out, plot = tmp_path / "o.json", tmp_path / "o.html"
    seen_at_table: list[bool] = []

    class Reader:
        def write(self, text: str) -> None:
            if "avg JCT" in text:
                seen_at_table.append(out.exists() and plot.exists())

        def flush(self) -> None:
            pass

    args = ["--trace", str(trace), "--cluster", "1,1,2,8,64", "--no-progress"]
    run(build_parser().parse_args([*args, "--json", str(out), "--plot", str(plot)]), out=Reader())
    assert seen_at_table == [True]


@pytest.mark.parametrize(
    "entry", [["-m", "scheduler.sim"], ["manage.py", "simulate"]], ids=["python-m", "manage.py"]
)
def test_a_reader_that_closes_stdout_costs_neither_the_files_nor_a_traceback(
    trace: Path, tmp_path: Path, entry: list[str]
) -> None:
    # `... | head -1`, deterministically: the pipe's read end is closed before the first write.
    out, plot = tmp_path / "p.json", tmp_path / "p.html"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        completed = subprocess.run(
            [sys.executable, *entry, "--trace", str(trace), "--cluster", "1,1,2,8,64",
             "--json", str(out), "--plot", str(plot), "--no-progress"],
            cwd=REPO, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
            check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert completed.returncode == 0, completed.stderr
    assert "Traceback" not in completed.stderr
    assert "BrokenPipe" not in completed.stderr
    assert json.loads(out.read_text())["policies"]["las"]["jobs_finished"] == 3
    assert plot.stat().st_size > 0
