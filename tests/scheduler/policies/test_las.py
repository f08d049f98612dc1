"""Tiresias 2D-LAS: queues, demotion, promotion, backfill, preemption across queues only."""

from __future__ import annotations

import pytest

from scheduler.core.types import Job, QueueChange
from scheduler.policies import decide
from scheduler.policies.las import tiresias_queues
from tests.scheduler.builders import (
    REQUIRED,
    devices,
    held,
    nodes_of,
    pending,
    preempted,
    running,
    snapshot,
    started,
)

ONE_NODE = devices({"n1": ("a100", 8)})
TWO_NODES = devices({"n1": ("a100", 4), "n2": ("a100", 4)})


@pytest.mark.parametrize(
    ("service", "stored_level", "expected_change"),
    [
        (3599.0, 0, None),  # just below the threshold: stays in queue 0
        (3600.0, 0, QueueChange(1, 1)),  # at the threshold: crossed it, tail of queue 1
        (9000.0, 0, QueueChange(1, 1)),
        (9000.0, 1, None),  # already there
    ],
)
def test_it_demotes_a_job_whose_service_crosses_its_queue_threshold(
    service: float, stored_level: int, expected_change: QueueChange | None
) -> None:
    job = pending(1, 1, service_since_promotion=service, queue_level=stored_level)
    queues = tiresias_queues(snapshot([job], ONE_NODE, queue_thresholds=(3600.0,)))
    assert queues.changes == (() if expected_change is None else (expected_change,))
    assert queues.levels[1] == (1 if service >= 3600 else 0)


@pytest.mark.parametrize(
    ("knob", "executed", "waited", "promoted"),
    [
        (8.0, 100.0, 800.0, True),  # waited exactly knob x executed
        (8.0, 100.0, 799.0, False),
        (8.0, 0.0, 10_000.0, False),  # never ran: nothing to compare against
        (None, 100.0, 10_000.0, False),  # knob off
        (0.0, 100.0, 10_000.0, False),  # knob off
        (2.0, 100.0, 200.0, True),
    ],
)
def test_it_promotes_a_starving_job_to_queue_zero_by_the_knob(
    knob: float | None, executed: float, waited: float, promoted: bool
) -> None:
    job = pending(
        1,
        1,
        service_since_promotion=5000.0,
        queue_level=1,
        executed_since_promotion=executed,
        waiting_since_promotion=waited,
    )
    queues = tiresias_queues(snapshot([job], ONE_NODE, promote_knob=knob))
    assert (QueueChange(1, 0, promoted=True) in queues.changes) is promoted
    assert queues.levels[1] == (0 if promoted else 1)


def test_it_does_not_promote_a_running_job_however_long_it_waited_before() -> None:
    job = running(
        1,
        [0],
        service_since_promotion=5000.0,
        queue_level=1,
        executed_since_promotion=10.0,
        waiting_since_promotion=1e6,
    )
    assert tiresias_queues(snapshot([job], ONE_NODE)).changes == ()


def test_a_promoted_job_goes_to_the_tail_of_queue_zero_in_this_round() -> None:
    # Job 1 entered queue 0 long ago; job 2 is promoted now; job 3 is demoted now.
    jobs = [
        pending(1, 8, submit_time=500.0),
        pending(
            2,
            8,
            submit_time=0.0,
            service_since_promotion=5000.0,
            queue_level=1,
            executed_since_promotion=10.0,
            waiting_since_promotion=100.0,
        ),
        pending(3, 8, submit_time=1.0, service_since_promotion=4000.0, queue_level=0),
    ]
    decisions = decide(snapshot(jobs, ONE_NODE))
    assert decisions.order == (1, 2, 3)
    assert started(decisions) == {1: tuple(range(8))}
    assert set(decisions.queue_changes) == {QueueChange(2, 0, promoted=True), QueueChange(3, 1)}


def test_it_backfills_small_jobs_around_a_blocked_eight_gpu_job() -> None:
    jobs = [
        running(1, [0, 1, 2, 3], started_at=9_900.0),  # protected by min runtime
        pending(2, 8, submit_time=1.0),
        pending(3, 2, submit_time=2.0),
        pending(4, 2, submit_time=3.0),
    ]
    decisions = decide(snapshot(jobs, ONE_NODE))
    assert set(started(decisions)) == {3, 4}
    assert held(decisions) == {2: "WaitingForResources: needs 8 \u00d7 GPU"}
    assert decisions.preemptions == ()


def test_a_pending_job_preempts_a_running_job_of_a_lower_priority_queue() -> None:
    jobs = [
        running(1, range(8), service_since_promotion=7200.0, queue_level=1),
        pending(2, 4),
    ]
    decisions = decide(snapshot(jobs, ONE_NODE))
    assert preempted(decisions) == {1: 2}
    assert len(started(decisions)[2]) == 4
    assert "job 2 in queue 0" in decisions.preemptions[0].reason


def test_it_preempts_the_lowest_priority_jobs_and_only_as_many_as_needed() -> None:
    jobs = [
        running(1, [0, 1], service_since_promotion=4000.0, queue_level=1, queue_entered_at=1.0),
        running(2, [2, 3], service_since_promotion=4000.0, queue_level=1, queue_entered_at=2.0),
        running(
            3, [4, 5, 6, 7], service_since_promotion=4000.0, queue_level=1, queue_entered_at=3.0
        ),
        pending(4, 2),
    ]
    decisions = decide(snapshot(jobs, ONE_NODE))
    # Job 3 is last in queue 1: taken first, and its 4 devices are enough.
    assert preempted(decisions) == {3: 4}
    assert set(started(decisions)) == {4}


def test_jobs_in_the_same_queue_do_not_preempt_each_other() -> None:
    jobs = [
        running(1, range(8), submit_time=5.0, queue_entered_at=5.0),
        pending(2, 4, submit_time=1.0, queue_entered_at=1.0),  # earlier, same queue 0
    ]
    decisions = decide(snapshot(jobs, ONE_NODE))
    assert decisions.preemptions == ()
    assert decisions.order == (2, 1)
    assert held(decisions)[2].startswith("WaitingForResources")


@pytest.mark.parametrize(
    ("started_at", "min_runtime", "is_preempted"),
    [
        (9_800.0, 300.0, False),  # ran 200 s of the 300 s minimum
        (9_700.0, 300.0, True),  # exactly the minimum: may go
        (9_800.0, 0.0, True),
        (None, 300.0, True),  # no start time known: not protected
    ],
)
def test_the_minimum_runtime_protects_a_recently_started_job(
    started_at: float | None, min_runtime: float, is_preempted: bool
) -> None:
    jobs = [
        running(1, range(8), service_since_promotion=5000.0, queue_level=1, started_at=started_at),
        pending(2, 8),
    ]
    decisions = decide(snapshot(jobs, ONE_NODE, min_runtime=min_runtime))
    assert (1 in preempted(decisions)) is is_preempted
    assert (2 in started(decisions)) is is_preempted
    if not is_preempted:
        assert held(decisions)[2] == "WaitingForResources: needs 8 \u00d7 GPU"


def test_a_non_preemptible_job_is_never_preempted() -> None:
    jobs = [
        running(1, range(8), service_since_promotion=5000.0, queue_level=1, preemptible=False),
        pending(2, 8),
    ]
    assert decide(snapshot(jobs, ONE_NODE)).preemptions == ()


def test_a_required_job_never_spans_nodes_even_when_enough_gpus_are_free_in_total() -> None:
    devs = devices({"n1": ("a100", 4), "n2": ("a100", 4)})
    jobs = [
        running(1, [0, 1], started_at=9_999.0),
        running(2, [4, 5], started_at=9_999.0),
        pending(3, 4, consolidation=REQUIRED),
        pending(4, 4),  # preferred: may spread
    ]
    snap = snapshot(jobs, devs)
    decisions = decide(snap)
    assert held(decisions) == {3: "WaitingForResources: needs 4 \u00d7 GPU on one node"}
    assert len(nodes_of(snap, started(decisions)[4])) == 2


def test_a_required_job_preempts_only_jobs_on_the_node_it_needs() -> None:
    jobs = [
        running(1, [0, 1], service_since_promotion=5000.0, queue_level=1, queue_entered_at=1.0),
        running(2, [4, 5], service_since_promotion=5000.0, queue_level=1, queue_entered_at=2.0),
        running(3, [6, 7], service_since_promotion=5000.0, queue_level=1, queue_entered_at=3.0),
        pending(4, 4, consolidation=REQUIRED),
    ]
    decisions = decide(snapshot(jobs, TWO_NODES))
    # Lowest priority first: job 3 (n2), then job 2 (n2) makes n2 whole. Job 1 on n1 is
    # higher in queue 1, so it keeps running although it alone would have sufficed.
    assert preempted(decisions) == {2: 4, 3: 4}
    assert started(decisions) == {4: (4, 5, 6, 7)}


def test_a_victim_on_a_node_that_cannot_help_a_required_job_is_not_preempted() -> None:
    jobs = [
        running(1, [0, 1], service_since_promotion=5000.0, queue_level=1, queue_entered_at=1.0),
        running(2, [6, 7], service_since_promotion=5000.0, queue_level=1, queue_entered_at=2.0),
        running(3, [2, 3], service_since_promotion=5000.0, queue_level=1, queue_entered_at=3.0),
        pending(4, 4, consolidation=REQUIRED),
    ]
    decisions = decide(snapshot(jobs, TWO_NODES))
    # Lowest priority first tries job 3 (n1, still only 2 there), then job 2 makes n2 whole;
    # job 3 turns out useless for a one-node job on n2 and keeps running.
    assert preempted(decisions) == {2: 4}
    assert started(decisions) == {4: (4, 5, 6, 7)}


def test_holds_carry_positions_and_the_order_lists_every_active_job() -> None:
    jobs = [
        running(1, range(8), started_at=9_999.0),
        pending(2, 1, submit_time=3.0),
        pending(3, 1, submit_time=2.0),
        pending(4, 1, submit_time=1.0, accepted_types=("h100",)),
    ]
    decisions = decide(snapshot(jobs, ONE_NODE))
    assert decisions.order == (1, 4, 3, 2)
    assert [(h.job_id, h.position) for h in decisions.holds] == [(4, 1), (3, 2), (2, 3)]
    assert held(decisions)[4] == "TypeUnavailable: no schedulable h100 in the cluster"


def test_a_job_that_fit_at_the_start_of_the_round_is_held_behind_the_jobs_ahead() -> None:
    jobs = [pending(1, 6, submit_time=1.0), pending(2, 4, submit_time=2.0)]
    decisions = decide(snapshot(jobs, ONE_NODE))
    assert held(decisions) == {2: "Behind: 1 job in queue 0"}


def test_nothing_starts_on_an_unschedulable_node_or_a_busy_device() -> None:
    from scheduler.core.types import Node

    devs = devices({"n1": ("a100", 4), "n2": ("a100", 4)})
    jobs = [pending(1, 4), pending(2, 2)]
    snap = snapshot(jobs, devs, nodes=[Node("n1", schedulable=False), Node("n2")], busy=[4, 5])
    decisions = decide(snap)
    assert started(decisions) == {2: (6, 7)}
    assert held(decisions)[1].startswith("WaitingForResources")


def test_a_kept_running_job_keeps_its_devices_even_on_a_draining_node() -> None:
    from scheduler.core.types import Node

    jobs: list[Job] = [running(1, [0, 1]), pending(2, 2)]
    snap = snapshot(jobs, ONE_NODE, nodes=[Node("n1", schedulable=False)])
    decisions = decide(snap)
    assert decisions.preemptions == ()
    assert held(decisions)[2] == (
        "NodeDrained: needs 2 \u00d7 GPU; the nodes that could hold it take no new jobs now"
        " (draining, drained, down or not answering)"
    )


def test_a_running_job_enters_its_new_queue_when_its_service_crossed_the_threshold() -> None:
    # 2 GPUs of speed 1.5: 3 GPU-s per second. The key is 3600 + 300, so the crossing was
    # 100 s ago; the FIFO key in queue 1 is that moment, not the round that noticed it.
    devs = devices({"n1": ("a100", 2)}, speed={"a100": 1.5})
    job = running(1, [0, 1], service_since_promotion=3900.0, attained_service=3900.0)
    queues = tiresias_queues(snapshot([job], devs, now=10_000.0))
    assert queues.changes == (QueueChange(1, 1, entered_at=9_900.0),)
    assert queues.entered_at[1] == 9_900.0
    # A pending job's key does not move: it enters its new queue now.
    waiting = pending(2, 1, service_since_promotion=3900.0)
    assert tiresias_queues(snapshot([waiting], devs)).changes == (QueueChange(2, 1),)


def test_a_device_a_wide_victim_leaves_over_goes_to_a_job_held_before_the_claim() -> None:
    # Job 4 (queue 1) holds both A100s of n2. Job 3 (an A100 on one node) comes first but
    # may not preempt yet (patience); job 6 may, and takes one of job 4's A100s. The other
    # sat idle while job 3 waited for exactly that (hypothesis, test_properties:
    # "held for resources does not fit in what the round leaves free").
    devs = devices({"n0": ("a100", 2), "n2": ("a100", 2), "n3": ("v100", 1)})
    common = {"consolidation": REQUIRED, "submit_time": 0.0, "queue_entered_at": 0.0}
    jobs = [
        running(0, [0, 1], **common),
        pending(3, 1, accepted_types=("a100",), pending_since=9_995.0, **common),
        running(4, [2, 3], attained_service=3600.0, service_since_promotion=3600.0, **common),
        pending(5, 1, **common),
        pending(6, 1, **common),
    ]
    snap = snapshot(jobs, devs, preempt_patience=600.0, min_runtime=300.0)
    decisions = decide(snap)
    assert started(decisions) == {5: (4,), 6: (2,), 3: (3,)}
    assert preempted(decisions) == {4: 6}  # credited to the job that claimed it


@pytest.mark.parametrize(
    ("max_victims", "reason"),
    [
        (
            1,
            "WaitingForResources: needs 4 × a100; would need 2 preemptions, at most 1 per "
            "waiting job",
        ),
        (2, None),  # allowed: it preempts both and starts
    ],
)
def test_a_job_held_by_the_victim_cap_says_so(max_victims: int, reason: str | None) -> None:
    # Before: "Behind: 1 job in queue 0", counting a job on the V100 it does not accept.
    devs = devices({"n1": ("a100", 4), "n2": ("v100", 1)})
    deep = {"service_since_promotion": 1e6, "attained_service": 1e6}
    jobs = [
        running(1, [4]),
        running(2, [0, 1], **deep),
        running(3, [2, 3], **deep),
        pending(9, 4, accepted_types=("a100",), pending_since=5.0),
    ]
    snap = snapshot(
        jobs, devs, gpulab_defaults=True, starvation_seconds=0.0, max_victims=max_victims
    )
    decisions = decide(snap)
    if reason is None:
        assert started(decisions) == {9: (0, 1, 2, 3)}
    else:
        assert held(decisions) == {9: reason}


def test_behind_counts_only_jobs_ahead_on_types_the_job_accepts() -> None:
    # Job 2 takes the last A100; job 1 on the V100 is ahead too, but keeps nothing from an
    # A100-only job.
    devs = devices({"n1": ("a100", 1), "n2": ("v100", 1)})
    jobs = [running(1, [1]), pending(2, 1), pending(3, 1, accepted_types=("a100",))]
    assert held(decide(snapshot(jobs, devs))) == {3: "Behind: 1 job in queue 0"}
