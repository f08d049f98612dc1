"""Variants of gpulab's default on the Philly-like trace (1,500 jobs, 8 x 8 GPUs, load 1.0):
one replay per variant, one JSON line each (avg wait s, preemptions, 16-GPU avg JCT s).

Usage: .venv/bin/python bench/experiments/tiresias_tuning/knob_grid.py SEED RESTORE "promote_knob=8" ...
(a variant is keyword arguments of SchedulerSettings; "" is the default). A research script.
"""
import ast
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from scheduler.core.types import SchedulerSettings, PlacementKind
from scheduler.sim.clusters import homogeneous_cluster
from scheduler.sim.engine import SimConfig, simulate
from scheduler.sim.generators import philly_like
from scheduler.sim.metrics import summarize

seed = int(sys.argv[1]); restore = float(sys.argv[2]); variants = sys.argv[3:]
cluster = homogeneous_cluster(8, 8)
trace = philly_like(1500, cluster.num_gpus, load=1.0, seed=seed, load_quantile=0.95)
base = SchedulerSettings(policy="las", placement=PlacementKind.BEST_FIT, restore_cost=restore)
for v in variants:
    kw = {k: ast.literal_eval(x) for k, x in (p.split("=", 1) for p in v.split(",") if p)}
    s = replace(base, **kw)
    t = time.perf_counter()
    m = summarize(simulate(trace, cluster, s, config=SimConfig(tick=10.0)))
    big = m["by_num_gpu"].get("16", {}).get("avg_jct")
    print(json.dumps({"seed": seed, "restore": restore, "v": v, "wait": round(m["avg_queueing_delay"]), "pre": m["preemptions"], "big": round(big), "wall": round(time.perf_counter()-t,1)}), flush=True)
