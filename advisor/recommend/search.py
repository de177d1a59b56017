"""The estimated search: type-level list edits judged with semantics what-if + the error model.

Used where replay cannot measure a candidate (no FP32 tensor dump: statistics-only dumps, local errors
only), and to rank candidates; every number it gives is labelled *estimated*.

See docs/recommend.md for the algorithm, the objective and the 1-minimality argument.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Sequence

import numpy as np

from ..oplists import BLACK, WHITE, OpLists
from ..semantics import LOW, Compiled, NodeKind, Plan
from ..semantics import low_mask
from .edits import Edit, lists_with, proposable
from .model import ErrorModel, Prediction

REL_TIE = 1e-9

@dataclass
class Candidate:
    edit: Edit
    priority: float
    reason: str
    nodes: list[int] = field(default_factory=list)   # culprit instances that led to it


@dataclass
class Evaluated:
    edits: frozenset
    plan: Plan
    pred: Prediction
    ok: bool
    low: np.ndarray | None = None

    @property
    def size(self) -> int:
        return len(self.edits)


class Searcher:
    """Holds the compiled graph, the base plan and the model; evaluates edit sets with caching."""

    def __init__(self, c: Compiled, base_lists: OpLists, mode: str, model: ErrorModel, tol: Any,
                 exclude: Iterable[str] = (), base_plan: Plan | None = None):
        self.c, self.base_lists, self.mode, self.model, self.tol = c, base_lists, mode, model, tol
        self.exclude = set(exclude)
        self.base_plan = base_plan if base_plan is not None else c.plan(base_lists, mode)
        self.cache: dict[frozenset, Evaluated] = {}
        self.evaluations = 0
        self._base_contrib: np.ndarray | None = None
        self.base = self.evaluate(frozenset())

    def evaluate(self, edits: frozenset) -> Evaluated:
        ev = self.cache.get(edits)
        if ev is not None:
            return ev
        if edits:
            p = self.c.what_if(self.base_plan, lists_with(self.base_lists, edits))
        else:
            p = self.base_plan
        low = low_mask(p)
        pred = self.model.evaluate(p, low=low)
        ok = self.tol.predicted_ok(pred.final_rel_l2, pred.final_nonfinite) if self.model.enabled else True
        ev = Evaluated(edits, p, pred, ok, low)
        self.cache[edits] = ev
        self.evaluations += 1
        return ev

    def base_contributions(self) -> np.ndarray:
        if self._base_contrib is None:
            self._base_contrib = self.model.contributions(self.base_plan)
        return self._base_contrib

    # ------------------------------------------------------------------ candidates
    def fix_candidates(self, extra_types: Sequence[str] = (), max_candidates: int = 10,
                       max_culprits: int = 60, extra_nodes: Sequence[Hashable] = ()) -> list[Candidate]:
        """Edits that can remove error: the culprit ops (top contributions to the final error under
        the model), every op along their decision chain (via ... root), plus attribution's types."""
        c, p, lists = self.c, self.base_plan, self.base_lists
        contrib = self.base_contributions()
        order = np.argsort(-np.nan_to_num(contrib, posinf=1e300))
        top = [int(i) for i in order[:max_culprits] if contrib[i] > 0]
        # the attribution's blamed ops (and, through the chain walk below, their decision roots)
        for nd in extra_nodes:
            i = c.index.get(nd)
            if i is None:
                i = next((j for j, k in enumerate(c.order) if str(k) == str(nd)), None) if len(c) < 5000 else None
            if i is not None and i not in top:
                top.append(int(i))
        cands: dict[Edit, Candidate] = {}

        def add(edit: Edit, prio: float, reason: str, node: int) -> None:
            if not proposable(edit.type, self.exclude):
                return
            cur = cands.get(edit)
            if cur is None:
                cands[edit] = Candidate(edit, prio, reason, [node])
            else:
                cur.priority = max(cur.priority, prio)
                if node not in cur.nodes:
                    cur.nodes.append(node)

        kind = c.kind
        for rank, i in enumerate(top):
            prio = float(min(contrib[i], 1e300)) if contrib[i] > 0 else 1e-30
            # walk the decision chain from the culprit to its root: each op on it decides i
            j, steps = i, 0
            while j >= 0 and steps < 64:
                if kind[j] == NodeKind.OP and p.precision_list[j] in LOW:
                    t = c.types[j]
                    cls = lists.list_of(t)
                    why = "culprit" if j == i else "decision chain of a culprit"
                    if cls != BLACK:
                        add(Edit("black-add", t), prio * (1.0 if j == i else 0.999), why, i)
                    if cls == WHITE:
                        add(Edit("white-remove", t), prio * 0.99, why + " (white root -> gray)", i)
                nxt = p.vias[j]
                if nxt == j:
                    break
                j = nxt
                steps += 1
        for k, t in enumerate(extra_types):
            cls = lists.list_of(t)
            if cls != BLACK:
                add(Edit("black-add", t), 1e-12 * (len(extra_types) - k), "attribution culprit", -1)
        ranked = sorted(cands.values(), key=lambda cd: (-cd.priority, cd.edit.kind, cd.edit.type))
        return ranked[:max_candidates]

    # ------------------------------------------------------------------ search
    def better(self, a: Evaluated, b: Evaluated | None) -> bool:
        """Objective: the largest low-precision share (costmodel.TimeModel.share), then fewest edits,
        then fewest casts, then smallest error."""
        if b is None:
            return True
        sa, sb = a.pred.low_share, b.pred.low_share
        if abs(sa - sb) > REL_TIE:
            return sa > sb
        if a.size != b.size:
            return a.size < b.size
        if a.pred.casts != b.pred.casts:
            return a.pred.casts < b.pred.casts
        return _err_key(a) < _err_key(b)

    def search(self, cands: list[Candidate], max_edits: int = 4, max_evals: int = 2000,
               time_budget_s: float | None = None) -> tuple[Evaluated | None, Evaluated | None, Evaluated, dict]:
        """(best feasible, fewest-edit feasible, closest evaluated, stats).  A set holds at most one
        edit per op type, so sets are enumerated up to min(max_edits, candidate types): a larger
        ``max_edits`` costs nothing more."""
        t0 = time.perf_counter()
        edits = [cd.edit for cd in cands]
        n_types = len({e.type for e in edits})
        largest = min(max_edits, n_types)
        singles = {e: self.evaluate(frozenset([e])) for e in edits}
        feasible: list[Evaluated] = [ev for ev in singles.values() if ev.ok]
        closest = min(list(singles.values()) + [self.base], key=_err_key)
        # greedy upper bound (handles many hazards quickly)
        cur = frozenset()
        while not feasible and not self.evaluate(cur).ok and len(cur) < largest:
            opts = [cur | {e} for e in edits if e not in cur and all(x.type != e.type for x in cur)]
            if not opts:
                break
            evs = [self.evaluate(o) for o in opts]
            nxt = min(evs, key=lambda ev: (_err_key(ev), -ev.pred.low_share))
            if _err_key(nxt) >= _err_key(self.evaluate(cur)):
                break
            cur = nxt.edits
        g_ev = self.evaluate(cur)
        if g_ev.ok and cur:
            feasible.append(g_ev)
        closest = min([closest, g_ev], key=_err_key)
        best = None
        for ev in feasible:
            if self.better(ev, best):
                best = ev
        # list edits towards black only move ops to fp32: a set's share is at most that of each member, and
        # at most the share with the union of its members' flips to fp32 (both known without evaluating it)
        tm = self.model.times
        base_low = self.base.low
        to32 = {e: np.flatnonzero(base_low & ~singles[e].low) for e in edits}
        # non-finite sources (model): every one must end in fp32 for the output to become finite, so a
        # set whose members together do not flip them all cannot be feasible (skipped unevaluated)
        src = np.flatnonzero(np.isinf(self.base_contributions())) if self.model.enabled else np.zeros(0, int)
        cover = {e: frozenset(src[~singles[e].low[src]].tolist()) for e in edits}
        need = frozenset(src.tolist())
        truncated = False
        for k in range(2, largest + 1):
            for combo in itertools.combinations(edits, k):
                if len({e.type for e in combo}) < k:
                    continue
                s = frozenset(combo)
                if any(f.edits <= s for f in feasible):
                    continue  # superset of a feasible set: more edits and no faster
                if need and all(x.kind in ("black-add", "white-remove") for x in combo) and \
                        not need <= frozenset().union(*(cover[x] for x in combo)):
                    continue
                if best is not None and all(x.kind in ("black-add", "white-remove") for x in combo):
                    if min(singles[e].pred.low_share for e in combo) < best.pred.low_share - REL_TIE:
                        continue
                    low = base_low.copy()
                    low[np.concatenate([to32[x] for x in combo])] = False
                    if tm.share(low) < best.pred.low_share - REL_TIE:
                        continue
                if self.evaluations >= max_evals or (
                        time_budget_s is not None and time.perf_counter() - t0 > time_budget_s):
                    truncated = True
                    break
                ev = self.evaluate(s)
                if ev.ok:
                    feasible.append(ev)
                    if self.better(ev, best):
                        best = ev
                elif _err_key(ev) < _err_key(closest):
                    closest = ev
            if truncated:
                break
        fewest = None
        for ev in feasible:
            if fewest is None or (ev.size, -ev.pred.low_share, _err_key(ev)) < (fewest.size, -fewest.pred.low_share,
                                                                                _err_key(fewest)):
                fewest = ev
        stats = {"candidates": len(edits), "candidate_types": n_types, "largest_set": largest,
                 "evaluations": self.evaluations, "truncated": truncated, "seconds": round(time.perf_counter() - t0, 3)}
        return best, fewest, closest, stats

    def minimize(self, ev: Evaluated) -> tuple[Evaluated, list[dict]]:
        """Drop edits the model does not need until every remaining one is necessary; returns the
        reduced set and the proof (predicted error/time without each edit)."""
        cur = ev
        changed = True
        while changed and cur.edits:
            changed = False
            for e in sorted(cur.edits, key=lambda x: (self._single_share(x), x.type)):
                without = self.evaluate(cur.edits - {e})
                if without.ok:
                    cur = without
                    changed = True
                    break
        proof = []
        for e in sorted(cur.edits, key=lambda x: (x.kind, x.type)):
            w = self.evaluate(cur.edits - {e})
            proof.append({"edit": str(e), "without_it": pred_dict(w.pred), "meets_tolerance_without_it": w.ok})
        return cur, proof

    def _single_share(self, e: Edit) -> float:
        """The share with this edit alone: the costliest edits (lowest share) are dropped first."""
        return self.evaluate(frozenset([e])).pred.low_share

    # ------------------------------------------------------------------ performance edits


def _err_key(ev: Evaluated) -> tuple[int, float]:
    e = ev.pred.final_rel_l2
    return (1 if ev.pred.final_nonfinite else 0, e if math.isfinite(e) else math.inf)


def pred_dict(p: Prediction) -> dict:
    e = p.final_rel_l2
    return {"final_rel_l2": (e if math.isfinite(e) else None), "final_nonfinite": p.final_nonfinite,
            "final_cosine": (p.final_cosine if math.isfinite(p.final_cosine) else None),
            "time_us": round(p.time_us, 3), "casts": p.casts, "low_precision_share": round(p.low_share, 6),
            "fp32_forfeited_us": round(p.lost_us, 3)}
