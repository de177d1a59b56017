"""The search that measures: candidate edit sets judged by replaying the recorded FP32 run (advisor/replay.py).

Objective, in order: the list passes the shared Tolerance on every calibration step; the largest
low-precision share of float kernel time (``Analysis.low_share``: exact for a plan, no replay needed); the
fewest edits.  Because the share of any edit set is known before it is replayed, the search replays sets in
order of decreasing share (ties: fewer edits first, then the error ranking), so the first set that passes is
the best one among the sets enumerated, and every subset of it came earlier: it is 1-minimal by
construction, and that is checked by replay anyway.

1. **Candidates.** Op types of low-precision kernels on the paths from each onset — an op whose replayed
   base error exceeds the tolerance while none of its producers' does; every independent hazard has one —
   to the outputs, plus the producers of those ops and the ops on their decision chains (a fix is often
   upstream of the symptom); when no single op exceeds, every low kernel.
   For each type: ``black-list to-add``; for a white type also ``white-list to-remove`` (it becomes gray
   and follows its producer).  At most ``max_types`` types, ranked by their worst replayed error.
2. **Exhaustive** over sets of up to ``max_exhaustive`` edits (one edit per type) in share order, replays
   deduplicated by plan (two sets with the same plan are one replay), within ``budget`` replays.
3. **Greedy + delta debugging** when no such set passes: all candidates together, widened to every low
   type if needed; then edits are dropped one by one (the costliest in share first) while the rest passes,
   until the set is 1-minimal by replay.
4. **Per-op keeps** (``per_op``: the mode honours ATC ``--keep_dtype``): the onsets, their producers and the
   ops on those producers' decision chains, one ``keep`` candidate per op instance (at most ``MAX_KEEPS``
   instances, worst replayed error first; only for types with several low instances, since otherwise a keep is
   the type-level edit with a longer file) -- and, before the keep of the same op, a ``customize`` candidate
   where the op can take fp16 inputs with an fp32 output (``semantics.fp16_in_fp32_out_entry``: the per-op form
   of ``cube_fp16in_fp32out``, an ATC ``--customize_dtypes`` line; its compute stays fp16, so it keeps more
   time low than the keep, and it is offered for a single instance too).  Sets mixing them with type-level edits,
   at least one per-op edit in each, are replayed in share order -- only those whose share beats the best type-level set by more than
   ``KEEP_MARGIN`` -- and the first that passes replaces the type-level answer, which is kept as the
   alternative.  The weighing: a type-level edit is simpler (one line that survives re-export of the
   model, where op names may change), so per-op advice must buy at least one point of float time.

In modes without a mixlist (``force_fp16``, ``allow_fp32_to_fp16``: GE ignores modify_mixlist there) the
type-level candidates are ``OpType::`` keep lines instead of list edits.

Every number carries how it was obtained: ``replayed`` (complete coverage), ``replayed, incomplete`` (some ops
could not be re-executed: their recorded FP32 outputs stood in, so the error is a lower bound).
"""
from __future__ import annotations

import itertools
from collections import Counter
import math
import time
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Mapping, Sequence

import numpy as np

from ..oplists import BLACK, WHITE, OpLists
from ..semantics import LOW, Plan, fp16_in_fp32_out_entry, uses_mixlist
from .edits import CUSTOMIZE, KEEP, Edit, keeps_apply, lists_with, overrides_with, proposable

DEFAULT_BUDGET = 200
MAX_EXHAUSTIVE = 3
MAX_TYPES = 24
MAX_KEEPS = 8
KEEP_MARGIN = 0.01        # per-op advice must keep this much more float time low than type-level advice


def plan_key(plan: Plan) -> tuple:
    """What a replay of ``plan`` executes: every node's compute and output dtype (two plans with equal keys
    replay equally; an fp16-in / fp32-out op differs from an fp16 one only in its output)."""
    return tuple(plan.precision_list), tuple(plan.emit_list)


@dataclass
class Trial:
    """One candidate edit set: its plan, predicted share and (once replayed) verdict."""

    edits: frozenset
    plan: Plan
    share: float
    key: tuple                              # ``plan_key`` (sets with equal keys replay equally)
    ok: bool | None = None                  # None: not replayed
    reasons: tuple = ()
    metrics: list = field(default_factory=list)
    coverage: float | None = None
    not_replayed: int = 0

    @property
    def size(self) -> int:
        return len(self.edits)

    @property
    def how(self) -> str:
        if self.ok is None:
            return "not evaluated"
        return "replayed" if self.not_replayed == 0 else "replayed, incomplete"

    def worst(self) -> tuple[int, float]:
        """(non-finite, worst rel-L2) over the steps, for 'closest' comparisons."""
        nf, rel = 0, 0.0
        for m in self.metrics:
            o = m.get("output") or {}
            if o.get("finite") is False:
                nf = 1
            r = o.get("rel_l2")
            if isinstance(r, (int, float)) and not math.isnan(r):
                rel = max(rel, float(r))
        return nf, rel

    def final(self) -> dict:
        """The final error as recommendation.json carries it (worst step)."""
        nf, rel = self.worst()
        cos = [m["output"].get("cosine") for m in self.metrics if (m.get("output") or {}).get("cosine") is not None]
        return {"final_rel_l2": rel if math.isfinite(rel) else None, "final_nonfinite": bool(nf),
                "final_cosine": (min(cos) if cos and not nf else None)}

    def summary(self) -> dict:
        nf, rel = self.worst()
        return {"edits": sorted(str(e) for e in self.edits), "ok": self.ok, "how": self.how,
                "low_precision_share": round(self.share, 6), "worst_rel_l2": rel if math.isfinite(rel) else None,
                "non_finite": bool(nf), "coverage": self.coverage, "reasons": list(self.reasons)[:4]}


@dataclass
class SearchResult:
    base: Trial
    best: Trial | None
    fewest: Trial | None
    closest: Trial
    minimality: list[dict]
    candidates: list[Edit]
    stats: dict
    type_level: Trial | None = None       # the best type-level set when per-op keeps won


class ReplaySearch:
    """Search over type-level list edits for one Analysis (with a replay recording)."""

    def __init__(self, analysis: Any, base_lists: OpLists, steps: Sequence[int] | None = None,
                 exclude: Iterable[str] = (), budget: int = DEFAULT_BUDGET, max_exhaustive: int = MAX_EXHAUSTIVE,
                 max_types: int = MAX_TYPES, skip: Iterable[tuple] = (),
                 widen: bool = False, per_op: bool = False, mode: str | None = None):
        self.a = analysis
        mode = mode or analysis.mode          # another mode than the run's: a what-if search (the replay takes any plan)
        self.per_op = per_op and keeps_apply(mode)
        self.type_keeps = not uses_mixlist(mode)     # type-level edits are OpType:: keep lines
        self.skip = set(skip)      # plans (precision tuples) already tried by measurement: never proposed again
        self.widen = widen
        self.base_lists = base_lists
        self.steps = list(steps) if steps is not None else None
        self.exclude = set(exclude)
        self.budget = budget
        self.max_exhaustive = max_exhaustive
        self.max_types = max_types
        self.replays = 0
        self._by_key: dict[tuple, Trial] = {}
        self._base_result = None
        self.failed_keys: set = set()
        self._cand_nodes: dict[str, list[int]] = {}
        self._base_plan = (analysis.plan_of(base_lists) if mode == analysis.mode else
                           analysis.compiled.plan(base_lists, mode, analysis.plan.overrides))
        self._keep_cands: list[Edit] = []
        self._keep_nodes: dict[Edit, list[int]] = {}
        self.base = self.trial(frozenset())

    # ------------------------------------------------------------------ evaluation
    def trial(self, edits: frozenset) -> Trial:
        """The Trial of an edit set (plan and share; no replay yet)."""
        if not edits:
            plan = self._base_plan
        else:
            keeps = any(e.is_override for e in edits)
            plan = self.a.compiled.what_if(self._base_plan, lists_with(self.base_lists, edits),
                                           overrides_with(self._base_plan.overrides, edits) if keeps else None)
        return Trial(frozenset(edits), plan, self.a.low_share(plan), plan_key(plan))

    def replay_trial(self, t: Trial) -> Trial:
        """Replay ``t`` (once per distinct plan) and fill its verdict."""
        if t.ok is not None:
            return t
        seen = self._by_key.get(t.key)
        if seen is not None:
            t.ok, t.reasons, t.metrics, t.coverage, t.not_replayed = (seen.ok, seen.reasons, seen.metrics,
                                                                      seen.coverage, seen.not_replayed)
            return t
        res = self.a.replay(t.plan, self.steps)
        t.metrics = res.final_metrics(tolerance=self.a.tolerance)
        v = self.a.tolerance.judge(t.metrics)
        t.ok, t.reasons = bool(v.ok), tuple(v.reasons)
        t.coverage, t.not_replayed = round(res.coverage, 6), len(res.not_replayed)
        self.replays += 1
        self._by_key[t.key] = t
        if not t.edits:
            self._base_result = res
        return t

    @property
    def budget_left(self) -> int:
        return self.budget - self.replays

    # ------------------------------------------------------------------ candidates
    def op_errors(self, res: Any = None) -> dict[Hashable, tuple[float, bool]]:
        """node -> (worst relative L2 of its first float output vs FP32, non-finite) over the steps of a replay
        (default: the base list's)."""
        from ..compare.metrics import tensor_metrics
        if res is None:
            self.replay_trial(self.base)
            res = self._base_result
        out: dict[Hashable, tuple[float, bool]] = {}
        rec = self.a.recording
        for s, view in res.targets.items():
            for op in rec.programs[s].ops:
                if op.node is None or op.entry not in view.entries:
                    continue
                outs = view.entries[op.entry].get("_outputs") or []
                if not outs or "tensor" not in outs[0][1]:
                    continue
                t = outs[0][1]["tensor"]
                g = op.golden_outputs[0] if op.golden_outputs else None
                if g is None or not t.is_floating_point() or t.shape != g.shape:
                    continue
                m = tensor_metrics(t, g)
                rel = m.get("rel_l2")
                rel = float(rel) if isinstance(rel, (int, float)) and not math.isnan(rel) else 0.0
                nf = not m.get("finite", True)
                prev = out.get(op.node, (0.0, False))
                out[op.node] = (max(prev[0], rel), prev[1] or nf)
        return out

    def node_errors(self, t: Trial) -> np.ndarray:
        """Per compiled node: the replayed relative L2 of its output under ``t`` (+inf: non-finite, NaN: not
        replayed / unchanged and exact)."""
        res = self._base_result if (not t.edits and self._base_result is not None) else \
            self.a.replay(t.plan, self.steps)
        c = self.a.compiled
        e = np.full(len(c), np.nan)
        for node, (rel, nf) in self.op_errors(res).items():
            i = c.index.get(node)
            if i is not None:
                e[i] = np.inf if nf else rel
        return e

    def replayed(self, edits: frozenset) -> Trial:
        """The replayed Trial of an edit set."""
        return self.replay_trial(self.trial(frozenset(edits)))

    def reasons(self, edits: Iterable[Edit]) -> dict:
        """Edit -> (node indices of its type among the candidates' ops, why it was a candidate)."""
        return {e: (self._keep_nodes[e], "an error onset, a producer of one or on its decision chain: "
                    + ("fp16 inputs, fp32 output (customize_dtypes)" if e.is_customize else "kept alone"))
                if e in self._keep_nodes else
                (self._cand_nodes.get(e.type, []), "on the path from an error onset to the outputs, or a producer of it")
                for e in edits}

    def candidates(self, widen: bool = False) -> list[Edit]:
        """Candidate edits (see the module docstring); ``widen``: every low kernel type."""
        a = self.a
        c = a.compiled
        g = a.graph
        plan = self._base_plan
        low = {c.order[i] for i, p in enumerate(plan.precision_list) if p in LOW}
        kernels = {n for n in low if g.nodes[n].get("kernel", True) and g.nodes[n].get("role", "op") == "op"}
        errs = self.op_errors()
        tol = a.tolerance.max_rel_l2
        if widen:
            chosen = set(kernels)
        else:
            bad = {n for n in c.order if n in errs and (errs[n][1] or errs[n][0] > tol)}
            # onsets: ops exceeding the tolerance none of whose producers does (each hazard has one)
            onsets = [n for n in c.order if n in bad and not any(p in bad for p in g.predecessors(n))]
            chosen = set()
            if onsets:
                import networkx as nx
                path = set(onsets).union(*(nx.descendants(g, n) for n in onsets))
                producers = {p for n in path for p in g.predecessors(n)}
                # and the decision chains of the producers: the ops whose precision they inherit (a gray Add
                # follows the Mul before it; moving the Mul moves both)
                chains = set()
                for n in producers:
                    q, k = n, 0
                    while k < 64:
                        v = plan.why(q).via
                        if v is None or v == q:
                            break
                        chains.add(v)
                        q, k = v, k + 1
                chosen = (path | producers | chains) & kernels
            if not chosen:
                chosen = set(kernels)
        worst: dict[str, float] = {}
        self._cand_nodes = {}
        for n in chosen:
            t = c.types[c.index[n]]
            self._cand_nodes.setdefault(t, []).append(c.index[n])
            e, nf = errs.get(n, (0.0, False))
            worst[t] = max(worst.get(t, 0.0), math.inf if nf else e)
        types = sorted(worst, key=lambda t: (-worst[t], t))
        types = [t for t in types if proposable(t, self.exclude)][: self.max_types]
        out: list[Edit] = []
        for t in types:
            cls = self.base_lists.list_of(t)
            if self.type_keeps:
                out.append(Edit(KEEP, t))
                continue
            if cls != BLACK:
                out.append(Edit("black-add", t))
            if cls == WHITE:
                out.append(Edit("white-remove", t))
        if self.per_op and not widen:
            self._keep_cands = self._instance_keeps(onsets, errs, kernels, set(types))
        self._rank = {e: i for i, e in enumerate(out + self._keep_cands)}
        return out

    def _instance_keeps(self, onsets: list, errs: dict, kernels: set, types: set) -> list[Edit]:
        """Per-op candidates: the onsets, their producers and those producers' decision chains (low kernels of a
        candidate type), onsets first, then worst error; for each, a customize (fp16 inputs, fp32 output) where
        the op takes one (``_customize``), then a keep where its type has more than one low instance."""
        a, c, g, plan = self.a, self.a.compiled, self.a.graph, self._base_plan
        near: dict = {n: 0 for n in onsets}
        for n in onsets:
            for p in g.predecessors(n):
                near.setdefault(p, 1)
                q, k = p, 0
                while k < 64:
                    v = plan.why(q).via
                    if v is None or v == q:
                        break
                    near.setdefault(v, 2)
                    q, k = v, k + 1
        count = Counter(c.types[c.index[n]] for n in kernels)
        custom = {n: self._customize(n) for n in near if n in kernels and c.types[c.index[n]] in types}
        picked = [n for n in custom if count[c.types[c.index[n]]] > 1 or custom[n] is not None]

        def err(n) -> float:
            e, nf = errs.get(n, (0.0, False))
            return math.inf if nf else e
        picked.sort(key=lambda n: (near[n], -err(n), str(n)))
        out = []
        for n in picked[:MAX_KEEPS]:
            i = c.index[n]
            name = str(a.graph.nodes[n].get("name", n))
            edits = [Edit(CUSTOMIZE, c.types[i], name, custom[n])] if custom[n] is not None else []
            if count[c.types[i]] > 1:
                edits.append(Edit(KEEP, c.types[i], name))
            for e in edits:
                self._keep_nodes[e] = [i]
                out.append(e)
        return out

    def _customize(self, n: Hashable):
        """The customize_dtypes entry giving op ``n`` fp16 inputs and an fp32 output (``semantics.
        fp16_in_fp32_out_entry`` on the search's lists), or None: not such an op, not in fp16 now, or already
        customized by the run's own file (the user's entry stands)."""
        c, plan = self.a.compiled, self._base_plan
        i = c.index[n]
        if plan.precision_list[i] != "fp16" or plan.emit_list[i] != "fp16" or i in plan.ctx.custom:
            return None
        return fp16_in_fp32_out_entry(self.base_lists, c.types[i], [p for p, _ in c.ranked[i]])

    # ------------------------------------------------------------------ search
    def run(self) -> SearchResult:
        t0 = time.perf_counter()
        base = self.replay_trial(self.base)
        stats: dict[str, Any] = {"method": "replay", "budget": self.budget}
        if base.ok:
            stats.update(replays=self.replays, seconds=round(time.perf_counter() - t0, 3))
            return SearchResult(base, base, base, base, [], [], stats)
        cands = self.candidates(widen=self.widen)
        best = self._exhaustive(cands, stats)
        if best is None and self.budget_left > 0:
            best = self._reduce(cands, stats, widen=False)
            if best is None and self.budget_left > 0:
                wide = self.candidates(widen=True)
                if set(wide) != set(cands):
                    cands = wide
                    best = self._reduce(cands, stats, widen=True)
        fewest = self._fewest(cands, best) if best is not None else None
        type_level = None
        if self._keep_cands and self.budget_left > 0:
            keep_best = self._with_keeps(cands, best, stats)
            if keep_best is not None:
                type_level, best = best, keep_best
                stats["granularity"] = "per-op"
        judged = list(self._by_key.values())
        closest = min(judged, key=lambda t: (t.worst(), t.size))
        minimality = self.minimality(best) if best is not None else []
        stats.update(candidates=len(cands) + len(self._keep_cands), replays=self.replays,
                     seconds=round(time.perf_counter() - t0, 3), truncated=best is None and self.budget_left <= 0)
        return SearchResult(base, best, fewest, closest, minimality, cands + self._keep_cands, stats, type_level)

    def _with_keeps(self, cands: list[Edit], best: Trial | None, stats: dict) -> Trial | None:
        """The best passing set with at least one per-op keep whose share beats ``best`` (the type-level
        answer) by more than KEEP_MARGIN; None when there is none within the budget."""
        floor = (best.share if best is not None else -1.0) + KEEP_MARGIN
        pool = cands + self._keep_cands
        sets: list[Trial] = []
        for k in range(1, self.max_exhaustive + 1):
            for combo in itertools.combinations(pool, k):
                if not any(e.per_op for e in combo) or len({e.slot for e in combo}) < k:
                    continue
                typed = {e.type for e in combo if not e.per_op}
                if any(e.per_op and e.type in typed for e in combo):
                    continue                  # the type-level edit already covers the kept op
                t = self.trial(frozenset(combo))
                if t.share > floor and t.key != self.base.key and t.key not in self.skip:
                    sets.append(t)
        stats["per_op_enumerated"] = len(sets)
        rank = self._rank
        sets.sort(key=lambda t: (-round(t.share, 9), t.size, sorted(rank.get(e, 0) for e in t.edits)))
        for t in sets:
            if self.budget_left <= 0 and t.key not in self._by_key:
                stats["per_op_truncated"] = True
                return None
            if self.replay_trial(t).ok:
                return t
        return None

    def _exhaustive(self, cands: list[Edit], stats: dict) -> Trial | None:
        """Sets of up to max_exhaustive edits, one per type, replayed in share order; the first pass wins."""
        sets: list[Trial] = []
        for k in range(1, self.max_exhaustive + 1):
            for combo in itertools.combinations(cands, k):
                if len({e.slot for e in combo}) < k:
                    continue
                sets.append(self.trial(frozenset(combo)))
        stats["enumerated"] = len(sets)
        rank = self._rank
        sets.sort(key=lambda t: (-round(t.share, 9), t.size, sorted(rank.get(e, 0) for e in t.edits)))
        passing_keys: list[frozenset] = []
        reserve = min(40, self.budget // 4)
        for t in sets:
            if any(p <= t.edits for p in passing_keys) or t.key in self.skip:
                continue
            if t.key == self.base.key:
                continue                      # changes nothing
            if self.budget_left <= reserve and t.key not in self._by_key:
                stats["exhaustive_truncated"] = True
                return None
            self.replay_trial(t)
            if t.ok:
                stats["phase"] = "exhaustive"
                return t
            self.failed_keys.add(t.key)
        return None

    def _fewest(self, cands: list[Edit], best: Trial) -> Trial:
        """The passing set with the fewest edits (then the largest share): sets smaller than ``best`` are
        replayed in share order while the budget lasts; ``best`` when none passes."""
        for k in range(1, best.size):
            combos = [self.trial(frozenset(c)) for c in itertools.combinations(cands, k)
                      if len({e.type for e in c}) == k]
            for t in sorted(combos, key=lambda t: -t.share):
                if t.key == self.base.key or (t.key not in self._by_key and self.budget_left <= 0):
                    continue
                if self.replay_trial(t).ok:
                    return t
        return best

    def _reduce(self, cands: list[Edit], stats: dict, widen: bool) -> Trial | None:
        """Greedy + delta debugging: everything together, then drop edits while the rest passes."""
        by_type: dict[str, Edit] = {}
        for e in cands:                       # one edit per type: black-add (the strongest)
            if e.type not in by_type or e.kind == "black-add":
                by_type[e.type] = e
        cur = self.replay_trial(self.trial(frozenset(by_type.values())))
        if not cur.ok:
            return None
        changed = True
        while changed and cur.size > 1 and self.budget_left > 0:
            changed = False
            # drop first the edit whose removal keeps the most low-precision time
            opts = sorted(cur.edits, key=lambda e: -self.trial(cur.edits - {e}).share)
            for e in opts:
                if self.budget_left <= 0:
                    break
                t = self.replay_trial(self.trial(cur.edits - {e}))
                if t.ok:
                    cur, changed = t, True
                    break
        stats["phase"] = "reduction" + (" (widened candidates)" if widen else "")
        return cur

    def minimality(self, t: Trial) -> list[dict]:
        """Replay the set minus each edit: 1-minimal when every one of them fails."""
        out = []
        for e in sorted(t.edits, key=lambda x: (x.kind, x.type)):
            w = self.trial(t.edits - {e})
            if w.key == t.key:
                w.ok, w.reasons = True, ("the same plan without it",)
            else:
                self.replay_trial(w)
            out.append({"edit": str(e), "meets_tolerance_without_it": bool(w.ok), "how": w.how,
                        "without_it": w.summary()})
        return out


MAX_SCOPE_SHARE = 0.5     # a scoped dump holds at most this share of the graph's ops
SCOPE_PRODUCER_LEVELS = 2  # producers of the departure's path (and theirs) a fix may move: choice


def dump_scope(a: Any, first: Hashable) -> list[str]:
    """The ops whose tensors would let the next run's candidates be replayed (``advisor.replay_scope``) on a run
    dumped with statistics only, around compare's first op exceeding the tolerance (``first``, the first
    departure): its path to the outputs, the ops a fix there could move (as the replay search picks its
    candidates: the producers of the path and theirs, ``SCOPE_PRODUCER_LEVELS``, and the ops on their decision
    chains -- a fix is often upstream of the symptom), every op downstream of those, and the producers of all of them (their inputs).  At most
    MAX_SCOPE_SHARE of the graph's ops: the path and the movable ops first, then the rest in execution order.
    Dump entry names (msprobe ``tensor_list``)."""
    import networkx as nx
    c, g, plan = a.compiled, a.graph, a.plan
    node = first if first in g else next((n for n in g if str(n) == str(first)), None)
    if node is None:
        return []

    def is_op(n) -> bool:
        return g.nodes[n].get("role", "op") == "op"
    path = {n for n in {node} | nx.descendants(g, node) if is_op(n)}
    movable: set = set()
    frontier = path
    for _ in range(SCOPE_PRODUCER_LEVELS):     # compare's first departure may trail the replayed onset
        frontier = {p for n in frontier for p in g.predecessors(n) if is_op(p)} - path - movable
        movable |= frontier
    for p in list(movable):
        q, k = p, 0
        while k < 8:
            v = plan.why(q).via
            if v is None or v == q or not is_op(v):
                break
            movable.add(v)
            q, k = v, k + 1
    seeds = path | movable
    pos = {n: i for i, n in enumerate(c.order)}
    order = lambda ns: sorted((n for n in ns if is_op(n)), key=lambda n: pos.get(n, 0))  # noqa: E731
    must = order(seeds)
    more = order(set().union(*(nx.descendants(g, n) for n in movable)) - set(must))
    cap = max(len(seeds), int(MAX_SCOPE_SHARE * sum(1 for n in c.order if is_op(n))))
    core = (must + more)[:cap]
    near = set(core) | {p for n in core for p in g.predecessors(n) if is_op(p)}
    return sorted({m for n in near for m in _dump_names(g.nodes[n], n)})


def _dump_names(a: Mapping, n: Hashable) -> list[str]:
    """The dump entry names of a node: a fused kernel's every member (each is its own dump entry, advisor.fusion),
    else its dump prefix."""
    return [str(m) for m in a["members"]] if a.get("members") else [str(a.get("dump") or a.get("name", n))]
