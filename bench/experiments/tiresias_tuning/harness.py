"""Exploratory harness (not gpulab policy): variants of the LAS pass for the open
'better than Tiresias' bar of issue 3. See README.md beside this file."""
import sys, json, time, argparse
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from dataclasses import replace
from scheduler.core.types import PlacementKind, SchedulerSettings, Snapshot, Decisions
from scheduler.sim.clusters import homogeneous_cluster
from scheduler.sim.engine import SimConfig, simulate
from scheduler.sim.generators import philly_like
from scheduler.sim.metrics import summarize
from scheduler.policies.las import tiresias_queues, tiresias_order, fifo_within_queue, las_reason
from scheduler.policies.base import run_pass

p = argparse.ArgumentParser()
p.add_argument('--seed', type=int, default=0)
p.add_argument('--restore', type=float, default=0.0)
p.add_argument('--jobs', type=int, default=1500)
p.add_argument('--q', default='exp')  # exp | default | expN:base
p.add_argument('--knob', type=float, default=8.0)
p.add_argument('--patience', type=float, default=600.0)
p.add_argument('--pmode', default='perjob')  # global | perjob | none
p.add_argument('--minrt', type=float, default=300.0)
p.add_argument('--backoff', type=float, default=1.0)  # multiplier per preemption
p.add_argument('--hyst', type=int, default=1)
p.add_argument('--promo_bypass', type=int, default=0)
p.add_argument('--tag', default='')
p.add_argument('--vcap', type=int, default=0)
p.add_argument('--vcap_promo', type=int, default=0)
p.add_argument('--starve', type=float, default=0)
p.add_argument('--gexp', type=float, default=0)
p.add_argument('--vbig', type=int, default=0)
p.add_argument('--reserve', type=int, default=0)
p.add_argument('--budget', type=int, default=0)
p.add_argument('--fair', type=float, default=1.0)
p.add_argument('--scls', type=int, default=0)
p.add_argument('--sfront', type=int, default=0)
p.add_argument('--sprot', type=float, default=0)
p.add_argument('--resv2', type=int, default=0)
p.add_argument('--rsrc', default='all')
p.add_argument('--rstarve', type=float, default=0)
p.add_argument('--rming', type=int, default=0)
p.add_argument('--rlmin', type=int, default=0)
p.add_argument('--stats', type=int, default=0)
a = p.parse_args()
import scheduler.policies.base as B
_orig_choose = B._choose_victims
CUR_PROMO = set()
def _capped(job, types, job_class, free, free_totals, pc, vlf, *args, **kw):
    if a.vbig == 1 or (a.vbig == 2 and job.id in CUR_PROMO):
        vlf = sorted(vlf, key=lambda v: -v.num_gpus)
    chosen = _orig_choose(job, types, job_class, free, free_totals, pc, vlf, *args, **kw)
    if False:
        chosen = _orig_choose(job, *args, **kw)
    cap = a.vcap_promo if (job.id in CUR_PROMO and a.vcap_promo) else a.vcap
    if cap and len(chosen) > cap:
        return []
    return chosen
B._choose_victims = _capped


if a.q == 'default':
    th = (3600.0,)
elif a.q.startswith('exp'):
    rest = a.q[3:]
    n, base = (17, 100.0)
    if rest:
        n, base = rest.split(':'); n = int(n); base = float(base)
    th = tuple(base * 2**i for i in range(n))
settings = SchedulerSettings(policy='las', placement=PlacementKind.BEST_FIT, queue_thresholds=th,
                             promote_knob=a.knob, fairness=a.fair, min_runtime=a.minrt, restore_cost=a.restore)
npre = {}
pend_since = {}
promoted_at = {}
BIG = 10**9
STATS = []
STARVED_RUN = set()

def decide(s: Snapshot) -> Decisions:
    now = s.now
    queues = tiresias_queues(s)
    for c in queues.changes:
        if c.promoted:
            promoted_at[c.job_id] = now
    levels = queues.levels
    CUR_PROMO.clear(); CUR_PROMO.update(promoted_at)
    if a.starve:
        CUR_PROMO.update(j.id for j in s.jobs if not j.is_running and now - pend_since.get(j.id, j.submit_time) >= a.starve)
    jobs = []
    for j in s.jobs:
        if j.is_running:
            k = npre.get(j.id, 0)
            if (j.id in STARVED_RUN and j.started_at is not None and now - j.started_at < a.sprot) or (a.budget and k >= a.budget) or (j.started_at is not None and now - j.started_at < a.minrt * a.backoff**k * j.num_gpus**a.gexp):
                j = replace(j, preemptible=False)
        jobs.append(j)
    s2 = replace(s, jobs=tuple(jobs))
    ordered = tiresias_order(s2, queues, fifo_within_queue)
    cls = {}
    if a.pmode == 'global':
        waited = any((now - pend_since.get(j.id, j.submit_time)) >= a.patience for j in s.jobs if not j.is_running and levels[j.id] == 0)
    for j in s2.jobs:
        L = levels[j.id]
        if j.is_running:
            cls[j.id] = L
        else:
            ok = True
            if a.pmode == 'perjob':
                ok = now - pend_since.get(j.id, j.submit_time) >= a.patience
            elif a.pmode == 'global':
                ok = waited
            if a.promo_bypass and j.id in promoted_at:
                ok = True
            cls[j.id] = (L + a.hyst - 1) if ok else BIG
            if a.scls and a.starve and now - pend_since.get(j.id, j.submit_time) >= a.starve:
                cls[j.id] = 0
    if a.sfront and a.starve:
        st_ = sorted((j for j in ordered if not j.is_running and now - pend_since.get(j.id, j.submit_time) >= a.starve), key=lambda j: (pend_since.get(j.id, j.submit_time), j.id))
        ids = {j.id for j in st_}
        ordered = st_ + [j for j in ordered if j.id not in ids]
    R = None
    if a.reserve:
        starving = [j for j in s2.jobs if not j.is_running and now - pend_since.get(j.id, j.submit_time) >= a.starve]
        if starving:
            R = min(starving, key=lambda j: (pend_since.get(j.id, j.submit_time), j.id))
            ordered = [R] + [j for j in ordered if j.id != R.id]
            cls[R.id] = BIG if a.reserve == 1 else cls[R.id]
    d = run_pass(s2, ordered, preemption_class=cls, levels=levels, queue_changes=queues.changes,
                 preempt_reason=lambda v, b: las_reason(v, b, levels))
    if R is not None and not any(st.job_id == R.id for st in d.starts):
        from scheduler.core.types import Hold, Reason, ReasonCode
        extra = tuple(Hold(st.job_id, Reason(ReasonCode.BEHIND, 'reservation'), len(d.holds) + i + 1) for i, st in enumerate(d.starts))
        d = replace(d, starts=(), preemptions=(), holds=d.holds + extra)
    if a.resv2:
        started = {st.job_id for st in d.starts}
        pos = {jid: i for i, jid in enumerate(d.order)}
        RS = CUR_PROMO if a.rsrc == 'all' else {j.id for j in s.jobs if not j.is_running and now - pend_since.get(j.id, j.submit_time) >= (a.rstarve or a.starve)}
        blocked = [jid for jid in d.order if jid in RS and s.job_by_id[jid].num_gpus >= a.rming and jid not in started and not s.job_by_id[jid].is_running]
        if blocked:
            R = blocked[0]
            cut = {st.job_id for st in d.starts if pos[st.job_id] > pos[R] and levels[st.job_id] >= max(levels[R] + a.resv2, a.rlmin)}
            if cut:
                from scheduler.core.types import Hold, Reason, ReasonCode
                extra = tuple(Hold(jid, Reason(ReasonCode.BEHIND, 'reservation'), len(d.holds) + i + 1) for i, jid in enumerate(sorted(cut)))
                d = replace(d, starts=tuple(st for st in d.starts if st.job_id not in cut), preemptions=tuple(pr for pr in d.preemptions if pr.by_job_id not in cut), holds=d.holds + extra)
    byc = {}
    for pr in d.preemptions:
        byc[pr.by_job_id] = byc.get(pr.by_job_id, 0) + 1
        npre[pr.job_id] = npre.get(pr.job_id, 0) + 1
        pend_since[pr.job_id] = now
    jb = s.job_by_id
    for b, c in byc.items():
        STATS.append((jb[b].num_gpus, c, jb[b].attained_service > 0, levels[b]))
    for pr in d.preemptions:
        STARVED_RUN.discard(pr.job_id)
    for st in d.starts:
        if st.job_id in CUR_PROMO:
            STARVED_RUN.add(st.job_id)
        promoted_at.pop(st.job_id, None)
    return d

cluster = homogeneous_cluster(8, 8)
trace = philly_like(a.jobs, cluster.num_gpus, load=1.0, seed=a.seed, load_quantile=0.95)
t0 = time.perf_counter()
r = simulate(trace, cluster, settings, decide=decide, config=SimConfig(tick=10.0, check_invariants=False))
m = summarize(r)
big = m['by_num_gpu'].get('16', {}).get('avg_jct')
if a.stats:
    from collections import Counter
    print('by preemptor gpus: events, victims', sorted((g, sum(1 for x in STATS if x[0]==g), sum(x[1] for x in STATS if x[0]==g)) for g in set(x[0] for x in STATS)))
    print('resumed preemptor victims', sum(x[1] for x in STATS if x[2]), 'fresh', sum(x[1] for x in STATS if not x[2]))
    G = {t.id: t.num_gpus for t in trace}
    print('victim gpus: ', sorted(Counter({g: sum(c for j, c in npre.items() if G[j]==g) for g in set(G.values())}).items()))
    print('npre dist', sorted(Counter(npre.values()).items()))
    print('jobs by gpus', sorted(Counter(G.values()).items()))
    print('victims per event', Counter(x[1] for x in STATS))
print(json.dumps(dict(tag=a.tag, seed=a.seed, restore=a.restore, wait=round(m['avg_queueing_delay']), pre=m['preemptions'], big=round(big or 0), jct=round(m['avg_jct']), done=m['jobs_finished'], wall=round(time.perf_counter()-t0,1), args=vars(a))))
