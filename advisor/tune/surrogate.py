"""What the measured runs teach about edit sets: a ridge regression of the measured final error on edit
indicators (scikit-learn), used to exclude, combine, screen and trim (docs/tune.md "Learning")."""
from __future__ import annotations

import math

from ..recommend.edits import Edit


class Surrogate:
    """What the measured runs teach about edit sets (scikit-learn ridge regression).

    Model: the measured final error of a tried list, ``err = min(rel_l2, CAP)``, regressed on edit
    indicators (one feature per edit seen in a tried list, intercept = the starting list's error),
    fitted on the runs with a finite output only (a non-finite output masks every other hazard).
    Errors of independent hazards add, so each coefficient is the measured effect of one edit
    (negative = it removes error).  An edit is *identified* when finite runs with and without it
    exist.  Used four ways:

    * **exclude**: op types whose identified edit changed the error by less than a tenth of the
      tolerance are passed to recommend as ``exclude`` -- it will not propose them again;
    * **combine**: after a failure, if the identified edits that each removed error are predicted to
      pass together (2x margin) and that set was never run, it is run before asking recommend;
    * **screen**: a proposal made only of *identified* edits (each seen both present and absent
      among measured runs) is predicted by the regression; if that prediction fails the tolerance
      the proposal is excluded without spending a run.  Proposals with a new edit are trusted to
      recommend's own error model (built from the latest measurements).
    * **trim**: in a passing list, edits whose measured effect is negligible (the prediction
      without them still passes with a 2x margin) are dropped -- the over-fix -- and confirmed.
    """

    CAP = 10.0

    def __init__(self, alpha: float = 1e-3):
        self.alpha = alpha
        self.points: list[dict] = []   # {"edits": frozenset, "err": capped error}

    @classmethod
    def capped(cls, rel_l2: float | None, finite: bool | None) -> float:
        if finite is False or rel_l2 is None or not math.isfinite(rel_l2):
            return cls.CAP
        return min(float(rel_l2), cls.CAP)

    def add(self, edits: frozenset[Edit], rel_l2, finite) -> None:
        self.points.append({"edits": frozenset(edits), "err": self.capped(rel_l2, finite)})

    def _finite(self) -> list[dict]:
        # non-finite runs are left out of the fit: a NaN masks every other hazard (two hazards each
        # leave the output non-finite alone), so they say nothing about one edit's effect
        return [p for p in self.points if p["err"] < self.CAP]

    def _fit(self):
        pts = self._finite()
        if len(pts) < 2:
            return None, []
        import numpy as np
        from sklearn.linear_model import Ridge
        feats = sorted({e.key for p in pts for e in p["edits"]})
        if not feats:
            return None, []
        X = np.array([[1.0 if f in {e.key for e in p["edits"]} else 0.0 for f in feats] for p in pts])
        y = np.array([p["err"] for p in pts])
        return Ridge(alpha=self.alpha, fit_intercept=True).fit(X, y), feats

    def identified(self, e: Edit) -> bool:
        have = [e in p["edits"] for p in self._finite()]
        return any(have) and not all(have)

    def useless_types(self, max_rel_l2: float) -> set[str]:
        """Op types whose edit was measured (identified among finite runs) to change the final
        error by less than a tenth of the tolerance: recommend is told not to propose them again."""
        eff = self.effects()
        out = set()
        for p in self._finite():
            for e in p["edits"]:
                c = eff.get(e.key)
                if c is not None and not e.is_override and self.identified(e) and c > -0.1 * max_rel_l2:
                    out.add(e.type)
        return out

    def effects(self) -> dict[str, float]:
        model, feats = self._fit()
        if model is None:
            return {}
        return {f: float(c) for f, c in zip(feats, model.coef_)}

    def predict(self, edits: frozenset[Edit]) -> float | None:
        """Predicted capped error of a list, or None when an edit is not identified by the data."""
        if not all(self.identified(e) for e in edits):
            return None
        model, feats = self._fit()
        if model is None:
            return None
        import numpy as np
        keys = {e.key for e in edits}
        return float(model.predict(np.array([[1.0 if f in keys else 0.0 for f in feats]]))[0])

    def screen(self, edits: frozenset[Edit], max_rel_l2: float) -> tuple[bool, float | None]:
        """(worth a run, learned prediction or None)."""
        if len(self._finite()) < 3:
            return True, None
        p = self.predict(edits)
        if p is None:
            return True, None
        return p <= max_rel_l2, p

    def combine(self, max_rel_l2: float) -> frozenset[Edit] | None:
        """The set of identified edits that each measurably removed error (effect below -a tenth of
        the tolerance), when the regression predicts it passes with a 2x margin; else None."""
        eff = self.effects()
        helpful = frozenset(e for p in self._finite() for e in p["edits"]
                            if self.identified(e) and eff.get(e.key, 0.0) < -0.1 * max_rel_l2)
        if not helpful:
            return None
        pred = self.predict(helpful)
        return helpful if pred is not None and pred <= 0.5 * max_rel_l2 else None

    def trim(self, edits: frozenset[Edit], measured: float, max_rel_l2: float) -> frozenset[Edit] | None:
        """A strict subset of a passing list predicted to pass with a 2x margin, or None."""
        if len(edits) < 2:
            return None
        eff = self.effects()
        keep, err = set(edits), measured
        for e in sorted(edits, key=lambda e: -eff.get(e.key, -math.inf)):
            c = eff.get(e.key)
            if c is None or not self.identified(e) or len(keep) <= 1:
                continue
            if err - c <= 0.5 * max_rel_l2:
                keep.discard(e)
                err -= c
        return frozenset(keep) if keep != set(edits) else None
