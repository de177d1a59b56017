"""The blame rule (docs/compare.md): whose precision decision introduced an op's error — the op's own, or that
of the low-precision producer whose output rounding feeds it.  A pure function of the op's measured facts,
property-tested on its own.

* With local errors (emulator runs): an op running low by its *own* decision (white, force, gray without a
  producer) introduces ``local_rel_l2`` and is blamed itself.  An op that runs low by *inheritance* from a low
  producer, or runs in FP32 while fed by one, receives inputs already rounded by that producer: the part of its
  error explained by input rounding (``inrnd_rel_l2``) is blamed on the producer when it dominates (>= DOMINANT
  of the op's own local error); otherwise the op is blamed with ``local_rel_l2`` (FP32 ops introduce nothing
  themselves).  An op rounding its inputs by its own decision whose producer also rounds is co-blamed with it.
* Without local errors (real NPU runs): ``introduced`` = max(out - in, 0), +inf for a non-finite output from
  finite inputs.  FP32 ops, and inheriting low ops whose output is finite, whose growth exceeds AMPLIFY_GROWTH
  amplify their low producer's rounding: blamed on that producer.  Otherwise the op itself.
* A view / pass-through op (rule ``follow``) makes no decision: it introduces nothing itself.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

AMPLIFY_GROWTH = 10.0      # growth above which an op is amplifying the error it receives
DOMINANT = 0.5             # input-rounding share of an op's local error that makes it the producer's


@dataclass(frozen=True)
class LocalError:
    """The op re-executed alone (local_error.csv): in low precision on FP32 inputs (``local``) and in FP32 on
    inputs rounded to low (``inrnd``); non-finite flags as counts."""

    local_rel: float = math.nan
    local_nf: float = 0.0
    inrnd_rel: float = math.nan
    inrnd_nf: float = 0.0


@dataclass(frozen=True)
class OpFacts:
    """What the rule looks at for one op."""

    own_low: bool                # the op runs in fp16/bf16
    inherited: bool              # its precision is inherited (gray-inherit / skip-cast / follow)
    follow: bool                 # a view / pass-through (no decision of its own)
    has_producer: bool           # a low-precision producer rounds its inputs
    out_rel: float               # worst relative L2 of its output vs FP32
    out_finite: bool
    in_rel: float                # worst relative L2 among its inputs
    in_finite: bool
    local: LocalError | None = None

    @property
    def growth(self) -> float:
        if self.in_rel <= 0:
            return math.inf if self.out_rel > 0 else 1.0
        return self.out_rel / self.in_rel


@dataclass(frozen=True)
class Blame:
    on_producer: bool            # blamed on the rounding producer (else on the op itself)
    introduced: float            # the error the blamed decision introduced (+inf: non-finite)
    basis: str
    co_producer: bool = False    # the producer shares the blame (both decisions must change)


def _bad(rel: float, nonfinite: float) -> float:
    if nonfinite is not None and not (isinstance(nonfinite, float) and math.isnan(nonfinite)) and nonfinite > 0:
        return math.inf
    return 0.0 if rel is None or math.isnan(rel) else float(rel)


def blame(f: OpFacts) -> Blame:
    """Who introduced op ``f``'s error, and how much (see the module docstring)."""
    if f.local is not None:
        own = _bad(f.local.local_rel, f.local.local_nf) if f.own_low else 0.0
        rnd = _bad(f.local.inrnd_rel, f.local.inrnd_nf) if f.has_producer else 0.0
        dominant = f.has_producer and rnd > 0 and rnd >= DOMINANT * own
        if dominant and (not f.own_low or f.inherited):
            b = Blame(True, rnd, "input rounding (inrnd)")
        else:
            b = Blame(False, own, "local", co_producer=dominant and f.own_low)
    else:
        if not f.out_finite and f.in_finite:
            excess = math.inf
        elif not f.out_finite:
            excess = 0.0          # non-finite received and passed on: introduced upstream
        else:
            excess = max(f.out_rel - f.in_rel, 0.0)
        amp_fp32 = not f.own_low and f.in_rel > 0 and (f.growth > AMPLIFY_GROWTH or not f.out_finite)
        amp_inh = f.own_low and f.inherited and f.out_finite and f.growth > AMPLIFY_GROWTH and f.in_rel > 0
        if f.has_producer and (amp_fp32 or amp_inh):
            b = Blame(True, excess, "amplified input error")
        else:
            b = Blame(False, excess if f.own_low else 0.0, "received/produced")
    if not b.on_producer and f.follow:
        b = Blame(False, 0.0, b.basis, b.co_producer)
    if math.isnan(b.introduced):
        b = Blame(b.on_producer, math.inf if not f.out_finite else 0.0, b.basis, b.co_producer)
    return b
