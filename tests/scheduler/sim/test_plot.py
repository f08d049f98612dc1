"""The Plotly report: one colour and one legend group per policy across both panels."""

from __future__ import annotations

from scheduler.sim.clusters import homogeneous_cluster
from scheduler.sim.plot import build_figure
from tests.scheduler.sim.helpers import job, reference_settings, run


def test_each_policy_has_one_colour_and_one_legend_group_in_both_panels() -> None:
    trace = [job(0, 1, 0, 100), job(1, 2, 10, 50), job(2, 1, 20, 30)]
    cluster = homogeneous_cluster(1, 2)
    results = {name: run(trace, reference_settings(name), cluster) for name in ("fifo", "las")}
    figure = build_figure(results)
    by_group: dict[str, list[tuple[str, str]]] = {}
    for trace_ in figure.data:
        by_group.setdefault(trace_.legendgroup, []).append((trace_.name, trace_.line.color))
    assert sorted(by_group) == ["fifo", "las"]
    colours = {}
    for label, traces in by_group.items():
        assert [name for name, _ in traces] == [f"{label} JCT", f"{label} GPUs"]
        assert len({colour for _, colour in traces}) == 1
        colours[label] = traces[0][1]
    assert colours["fifo"] != colours["las"]
