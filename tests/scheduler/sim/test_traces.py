"""Reading Tiresias traces: the shipped file, and bad input that names line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.sim.traces import (
    TraceError,
    load_tiresias_trace,
    scale_durations,
    write_tiresias_trace,
)

SHARED = Path(__file__).resolve().parents[4] / "shared" / "traces" / "tiresias"
HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"


def write(tmp_path: Path, body: str, header: str = HEADER) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(header + body, encoding="utf-8")
    return path


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/traces not present")
def test_it_reads_the_shipped_60_job_trace_with_crlf_endings() -> None:
    jobs = load_tiresias_trace(SHARED / "60_job.csv")
    assert len(jobs) == 60
    assert [j.id for j in jobs] == list(range(60))
    assert sum(j.gpu_time for j in jobs) == 26624  # README: total 26,624 GPU·s
    assert {j.num_gpus for j in jobs} == {1, 2, 4, 8}
    assert jobs[0].model == "vgg19" and jobs[0].duration == 164


def test_it_sorts_by_submit_time_then_id(tmp_path: Path) -> None:
    path = write(tmp_path, "2,1,50,0,a,10,0\n1,1,50,0,a,10,0\n0,2,60,0,a,10,0\n")
    assert [j.id for j in load_tiresias_trace(path)] == [1, 2, 0]


def test_it_reads_optional_user_group_and_consolidation_columns(tmp_path: Path) -> None:
    header = HEADER.strip() + ",user,group,consolidation\n"
    path = write(tmp_path, "0,4,0,0,vgg,100,0,alice,nlp,required\n", header)
    (only,) = load_tiresias_trace(path)
    assert (only.user, only.group, only.consolidation.value) == ("alice", "nlp", "required")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("0,x,0,0,a,10,0\n", "trace.csv:2: field 'num_gpu' is not a number: 'x'"),
        ("0,1,0,0,a,10,0\n1,0,5,0,a,10,0\n", "trace.csv:3: field 'num_gpu' must be >= 1"),
        ("0,1,-5,0,a,10,0\n", "trace.csv:2: field 'submit_time' must be >= 0"),
        ("0,1,0,0,a,0,0\n", "trace.csv:2: field 'duration' must be > 0"),
        ("0,1,0,0,a,,0\n", "trace.csv:2: field 'duration' is missing or empty"),
        ("0,1.5,0,0,a,10,0\n", "trace.csv:2: field 'num_gpu' must be a whole number"),
        ("0,1,0,0,a,10,0,extra\n", "trace.csv:2: more cells than header columns"),
        ("0,1,0,0,a,10,0\n0,1,0,0,a,10,0\n", "job_id 0 appears twice"),
        ("1e20,1,0,0,a,10,0\n", "field 'job_id' must be a whole number, got '1e20'"),
        ("", "the trace has no jobs"),
    ],
)
def test_bad_rows_raise_an_error_naming_line_and_field(
    tmp_path: Path, body: str, message: str
) -> None:
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_tiresias_trace(write(tmp_path, body))


def test_a_header_without_required_columns_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "0,1,0\n", header="job_id,gpus,submit_time\n")
    with pytest.raises(TraceError, match=r"trace.csv:1: header lacks column\(s\) num_gpu"):
        load_tiresias_trace(path)


def test_a_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read trace"):
        load_tiresias_trace(tmp_path / "nope.csv")


def test_scaling_and_writing_round_trip(tmp_path: Path) -> None:
    jobs = load_tiresias_trace(write(tmp_path, "0,2,0,7,vgg,10,5\n1,1,5,0,a,20,0\n"))
    scaled = scale_durations(jobs, 10)
    assert [j.duration for j in scaled] == [100, 200]
    out = tmp_path / "out.csv"
    write_tiresias_trace(scaled, out)
    assert load_tiresias_trace(out) == scaled


def test_large_integer_ids_stay_exact(tmp_path: Path) -> None:
    # Through float, 2^53 + 1 and 2^53 are the same number and the ids would collide.
    body = "9007199254740993,1,0,0,a,10,0\n9007199254740992,1,0,0,a,10,0\n4.0,1,0,0,a,10,0\n"
    jobs = load_tiresias_trace(write(tmp_path, body))
    assert sorted(job.id for job in jobs) == [4, 9007199254740992, 9007199254740993]
