"""95% confidence intervals over repetitions: the one place the report's intervals are computed.

Strictly positive, skewed quantities (delays, throughputs) get Student-t on the logarithms of the
per-repetition values: an interval for the geometric mean, exp(mean(log x) ± t·s/√n), whose bounds are
always > 0 (t on the raw values drops below zero with n = 2). Quantities that can be 0 or negative get
Student-t on the raw values. A throughput that was 0 in some repetition (nothing delivered in the window)
has no logarithm: it gets t on the raw values with the lower bound raised to 0, the least the mean can be
(cutting an interval to the values the quantity can take keeps its coverage). With n < 2 there is no
interval. Counts (and any other quantity that cannot be negative) get the same floor at 0. A proportion
gets a Wilson score interval on the counts pooled over the repetitions (successes, trials), which stays
inside [0, 1]. The t quantiles are scipy.stats' (exact for every df)."""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from scipy import stats as _scipy_stats

LOG_T = "t on logs"   # interval for the geometric mean
RAW_T = "t"           # interval for the arithmetic mean
RAW_T_FLOOR = "t floored at 0"   # the same for a quantity that cannot be negative, its lower bound cut at 0
WILSON = "Wilson on pooled counts"   # a proportion: successes / trials summed over the repetitions
NO_CI = ""            # n < 2

# metrics whose per-run values are strictly positive when defined: delays and throughputs
POSITIVE_METRICS = frozenset({"throughput_multi", "throughput_2plus_Bps", "throughput_2plus_per_model_h",
                              "latency_mean", "latency_p50", "mean_delay_s", "delay_model_s",
                              "delay_p99_model_s"})
# per-run counts and other quantities that cannot be negative: t on raw values, lower bound cut at 0
NONNEGATIVE_METRICS = frozenset({"submitted", "accepted", "delivered", "undelivered", "duplicates", "hops_mean",
                                 "lost", "late", "route_moves", "route_moves_per_hour", "nexthop_match",
                                 "better_path_share", "modal_route_match", "cost_error_max",
                                 "rate_overflowed", "rate_starved_s"})


def t975(df: int) -> float:
    """0.975 quantile of Student's t with df degrees of freedom (df < 1: the normal's)."""
    if df < 1:
        return float(_scipy_stats.norm.ppf(0.975))
    return float(_scipy_stats.t.ppf(0.975, df))


@dataclass(frozen=True)
class Interval:
    """mean: arithmetic mean; centre: what the interval bounds (geometric mean for t on logs);
    lo/hi: NaN when n < 2; method: LOG_T, RAW_T, RAW_T_FLOOR, WILSON or NO_CI."""
    mean: float
    centre: float
    lo: float
    hi: float
    n: int
    method: str

    @property
    def half_width(self) -> float:
        """(hi - lo) / 2: the symmetric half-width for t on raw values (the older `ci95` column)."""
        return (self.hi - self.lo) / 2

    def separates_from(self, other: Interval) -> bool | None:
        """True when the two intervals do not overlap, None when either has none."""
        if math.isnan(self.lo) or math.isnan(other.lo):
            return None
        return self.hi < other.lo or other.hi < self.lo


def clean(values: Iterable) -> list[float]:
    """The values as floats, without None and NaN."""
    out = []
    for v in values:
        if v is None:
            continue
        f = float(v)
        if not math.isnan(f):
            out.append(f)
    return out


def _t_interval(vals: list[float]) -> tuple[float, float, float]:
    n = len(vals)
    m = sum(vals) / n
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (n - 1))
    h = t975(n - 1) * sd / math.sqrt(n)
    return m, m - h, m + h


def ci95(values: Iterable, positive: bool = False, nonnegative: bool = False) -> Interval:
    """95% CI of the values (None/NaN dropped). positive=True: t on logs when every value is > 0;
    with a zero among them (logs do not exist there) t on raw values, its lower bound raised to 0 when it
    fell below: a quantity that cannot be negative. nonnegative=True (counts): t on raw values with that
    floor."""
    vals = clean(values)
    n = len(vals)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, math.nan, 0, NO_CI)
    mean = sum(vals) / n
    if positive and all(v > 0 for v in vals):
        gmean = math.exp(sum(math.log(v) for v in vals) / n)
        if n < 2:
            return Interval(mean, gmean, math.nan, math.nan, n, NO_CI)
        c, lo, hi = _t_interval([math.log(v) for v in vals])
        return Interval(mean, math.exp(c), math.exp(lo), math.exp(hi), n, LOG_T)
    if n < 2:
        return Interval(mean, mean, math.nan, math.nan, n, NO_CI)
    _, lo, hi = _t_interval(vals)
    if (positive or nonnegative) and lo < 0 and all(v >= 0 for v in vals):
        return Interval(mean, mean, 0.0, hi, n, RAW_T_FLOOR)
    return Interval(mean, mean, lo, hi, n, RAW_T)


def wilson(successes: float, trials: float, mean: float = math.nan, n: int = 0) -> Interval:
    """95% Wilson score interval for a proportion from counts pooled over the repetitions; centre = the
    pooled proportion successes / trials, mean = the repetitions' mean (given by the caller), n = the
    repetitions. Successes above trials (a record without its submission) count as trials."""
    if not trials or trials <= 0 or n < 1:
        return Interval(mean, math.nan, math.nan, math.nan, n, NO_CI)
    k = min(max(float(successes), 0.0), float(trials))
    p = k / trials
    z = float(_scipy_stats.norm.ppf(0.975))
    denom = 1 + z * z / trials
    mid = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    # at p = 0 or 1 a bound is exactly 0 or 1; rounding must not move it or put one outside [0, 1]
    lo = 0.0 if k == 0 else max(0.0, mid - half)
    hi = 1.0 if k == trials else min(1.0, mid + half)
    return Interval(mean, p, lo, hi, n, WILSON)


def metric_ci(metric: str, values: Iterable) -> Interval:
    """ci95 with the method the metric's range calls for."""
    return ci95(values, positive=metric in POSITIVE_METRICS, nonnegative=metric in NONNEGATIVE_METRICS)


def mean_ci(values: Iterable) -> tuple[float, float, int]:
    """Mean, Student-t 95% half-width on raw values (NaN when n < 2) and n (the older interface)."""
    iv = ci95(values)
    return iv.mean, iv.half_width, iv.n


def fmt_interval(centre: float, lo: float, hi: float, digits: int = 3) -> str:
    """"centre [lo, hi]", "centre" without an interval, "–" without a value."""
    if centre is None or math.isnan(centre):
        return "–"
    text = f"{centre:.{digits}g}"
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return f"{text} [–]"
    return f"{text} [{lo:.{digits}g}, {hi:.{digits}g}]"
