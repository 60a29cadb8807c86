"""The workload plan: who submits what, to whom, and when (model seconds).

`schedule(scenario, nodes)` expands the scenario's generators into a sorted
list of PlannedSubmission, fully determined by the scenario seed. Each
(generator, node) pair draws from its own random streams, seeded from the
scenario seed and the names, so adding a node or a generator never reshuffles
the submissions of the others; the times, sizes and recipients also have
separate streams, so changing the size distribution keeps the arrival times.

Defaults follow the thesis (Brachman 1989, section 6.2.1): interarrival
Normal(mean 50 s) per MTA, sizes from Table 6.1, recipient uniform over the
other MTAs (never itself).
"""
from __future__ import annotations

import bisect
import hashlib
import itertools
import logging
import math
import os
import random
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable, NoReturn

from testbed import units
from testbed.scenario.loader import ScenarioError
from testbed.scenario.spec import Generator, Interarrival, RecipientChoice, Scenario, SizeDist
from testbed.scenario.sections.workload import SIZE_FILE_MAX_BYTES, size_file_problem, size_file_stat_problem

log = logging.getLogger(__name__)

# Thesis Table 6.1 (Distribution of Message Sizes), in fragments: 1 with probability .70,
# 2-30 with .20, 31-100 with .10, uniform within a range.
THESIS_SIZE_MIX: tuple[tuple[float, int, int], ...] = ((0.70, 1, 1), (0.20, 2, 30), (0.10, 31, 100))

# A normal interarrival is redrawn below this fraction of its mean (why: a gap must be positive;
# with the default sd = mean/4 a draw below 1% of the mean has probability ~4e-5, so the bias is nil).
NORMAL_MIN_FRACTION = 0.01
NORMAL_MAX_REDRAWS = 100

MAX_SUBMISSIONS = 5_000_000   # a plan larger than this is certainly a typo in the scenario (e.g. mean 1ms for a day)


@dataclass(frozen=True)
class PlannedSubmission:
    at: float                          # model seconds after the workload begins (after warm-up)
    node: str                          # submitting node
    recipients: tuple[str, ...]        # recipient node names
    size: int                          # bytes
    priority: int
    user: str = ""                     # the recipient user at each recipient node ("" = the node itself)
    originator: str = ""               # the submitting user ("" = none)


@dataclass(frozen=True)
class PlannedPublication:
    """A publication (a generator with `publish:`): the broker of `node` finds its subscribers."""
    at: float
    node: str
    topic: str
    size: int
    priority: int


def schedule(scenario: Scenario, nodes: list[str]) -> list[PlannedSubmission | PlannedPublication]:
    """Every generator applied to its nodes over [start, min(stop, duration)), sorted by time."""
    plan: list[PlannedSubmission | PlannedPublication] = []
    base = Path(scenario.source).parent if scenario.source else Path(".")
    for gi, gen in enumerate(scenario.workload.generators):
        _check_means(gen.interarrival, f"workload.generators[{gi}].interarrival")
        sizes = _size_sampler(gen.size, base, f"workload.generators[{gi}].size")
        for node in _generator_nodes(gen, nodes):
            if gen.publish is not None:
                plan.extend(_publications(scenario, gi, gen, node, sizes, len(plan)))
                continue
            choose = _recipient_chooser(gen.recipients, node, nodes)
            if choose is None:
                log.info("generator %d: node %s has no recipient other than itself; it submits nothing", gi, node)
                continue
            t_rng = _rng(scenario.seed, gi, node, "time")
            s_rng = _rng(scenario.seed, gi, node, "size")
            r_rng = _rng(scenario.seed, gi, node, "recipients")
            end = scenario.duration if gen.stop is None else min(gen.stop, scenario.duration)
            times = arrival_times(gen.interarrival, gen.start, end, t_rng, limit=MAX_SUBMISSIONS - len(plan))
            prio = gen.priority
            plan.extend([PlannedSubmission(at, node, choose(r_rng), sizes(s_rng), prio, gen.recipients.user,
                                           gen.originator) for at in times])
    # stable sort: equal (at, node) keep generator order, so the order is fully determined
    plan.sort(key=attrgetter("at", "node"))
    return plan


def _publications(scenario: Scenario, gi: int, gen: Generator, node: str, sizes: Callable[[random.Random], int],
                  planned: int) -> list[PlannedPublication]:
    """One publishing generator at one node: times and sizes as for mail, a topic drawn per publication."""
    assert gen.publish is not None
    topics = [t.replace("{node}", node) for t in gen.publish.topics]
    t_rng = _rng(scenario.seed, gi, node, "time")
    s_rng = _rng(scenario.seed, gi, node, "size")
    k_rng = _rng(scenario.seed, gi, node, "topics")
    end = scenario.duration if gen.stop is None else min(gen.stop, scenario.duration)
    times = arrival_times(gen.interarrival, gen.start, end, t_rng, limit=MAX_SUBMISSIONS - planned)
    count = len(topics)
    source = _source_draw(gen.publish.sources, gen.publish.skew, _rng(scenario.seed, gi, node, "sources"))
    return [PlannedPublication(at, node, topics[int(k_rng.random() * count)].replace("{source}", f"{node}-{source()}"),
                               sizes(s_rng), gen.priority)
            for at in times]


def _source_draw(count: int, skew: float, rng: random.Random) -> Callable[[], int]:
    """Draws a source 1..count with weight 1 / k**skew (Zipf); its own random stream, so the times, sizes
    and topics of a plan do not change with the sources."""
    if count <= 0:
        return lambda: 0
    cumulative = list(itertools.accumulate(1.0 / k ** skew for k in range(1, count + 1)))
    total = cumulative[-1]
    return lambda: min(bisect.bisect_left(cumulative, rng.random() * total), count - 1) + 1


def derive_seed(seed: int, *names: object) -> int:
    """A stable 64-bit seed from the scenario seed and names (not Python's salted hash)."""
    text = "/".join(str(x) for x in (seed,) + names)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _rng(seed: int, gi: int, node: str, stream: str) -> random.Random:
    return random.Random(derive_seed(seed, "generator", gi, node, stream))


def _generator_nodes(gen: Generator, nodes: list[str]) -> list[str]:
    if gen.nodes == "all":
        return list(nodes)
    wanted = [gen.nodes] if isinstance(gen.nodes, str) else list(gen.nodes)
    return [n for n in wanted if n in nodes]


# ---- interarrival times ----------------------------------------------------------------------

def arrival_times(ia: Interarrival, start: float, end: float, rng: random.Random,
                  limit: int = MAX_SUBMISSIONS) -> list[float]:
    """Arrival instants in [start, end): a renewal process whose law may change at period boundaries.

    When a gap would cross into another schedule period, the clock restarts at the boundary
    with the new period's law (exact for exponential gaps, which are memoryless; for the others
    it means the new regime starts at the boundary instead of after one old-regime gap).
    Outside the listed periods the top-level law applies; with dist "piecewise" there are
    no arrivals outside the periods. More than `limit` arrivals is a ScenarioError (a typo such
    as a 1 ms mean over a day would otherwise exhaust memory).
    """
    periods = sorted(ia.schedule, key=lambda p: p["from"])
    if not periods:
        return _renewal(_law_at(ia, periods, start), start, end, rng, limit)
    boundaries = sorted({float(p[k]) for p in periods for k in ("from", "to")})
    times: list[float] = []
    t = start
    while t < end:
        law = _law_at(ia, periods, t)
        nxt = next((b for b in boundaries if b > t), math.inf)
        if law is None:           # a silent stretch of a piecewise schedule: skip to the next period
            t = nxt
            continue
        gap = _draw(law, rng)
        if t + gap >= nxt:
            t = nxt
            continue
        t += gap
        if t < end:
            times.append(t)
            if len(times) > limit:
                _too_many()
    return times


def _renewal(law: tuple[str, float, float | None] | None, start: float, end: float,
             rng: random.Random, limit: int) -> list[float]:
    """The common case without schedule periods: one law throughout."""
    times: list[float] = []
    if law is None:
        return times
    gap = _gap_sampler(law, rng)
    t = start + gap()
    while t < end:
        times.append(t)
        if len(times) > limit:
            _too_many()
        t += gap()
    return times


def _gap_sampler(law: tuple[str, float, float | None], rng: random.Random) -> Callable[[], float]:
    """_draw specialised once per law (the inner loop of a day-long plan runs it 10^5 times)."""
    dist, mean, sd = law
    if dist == "exponential":
        rate = 1.0 / mean
        expo = rng.expovariate
        return lambda: expo(rate)
    if dist == "constant":
        return lambda: mean
    sigma = mean / 4.0 if sd is None else float(sd)
    floor = mean * NORMAL_MIN_FRACTION
    gauss = rng.gauss

    def normal() -> float:
        x = gauss(mean, sigma)
        return x if x >= floor else _draw(law, rng)    # rare: redraw as _draw does
    return normal


def _check_means(ia: Interarrival, where: str) -> None:
    """The loader guarantees these for files; a Scenario built in code gets the same one-sentence error."""
    means = [(f"{where}.mean", ia.mean)] + [(f"{where}.schedule[{i}].mean", p.get("mean"))
                                            for i, p in enumerate(ia.schedule)]
    for key, mean in means:
        if not isinstance(mean, (int, float)) or isinstance(mean, bool) or not math.isfinite(mean) or mean <= 0:
            raise ScenarioError(f"{key}: expected a positive duration, got {mean!r}.")


def _too_many() -> NoReturn:
    raise ScenarioError(f"the workload plans more than {MAX_SUBMISSIONS} submissions; "
                        f"check the interarrival means against the duration.")


def _law_at(ia: Interarrival, periods: list[dict[str, Any]], t: float) -> tuple[str, float, float | None] | None:
    for p in periods:
        if p["from"] <= t < p["to"]:
            return (p.get("dist", "normal"), float(p["mean"]), p.get("sd"))
    if ia.dist == "piecewise":
        return None
    return (ia.dist, float(ia.mean), ia.sd)


def _draw(law: tuple[str, float, float | None], rng: random.Random) -> float:
    dist, mean, sd = law
    if dist == "exponential":
        return rng.expovariate(1.0 / mean)
    if dist == "constant":
        return mean
    # normal, as in the thesis (section 6.2.1); sd defaults to mean / 4
    sigma = mean / 4.0 if sd is None else float(sd)
    floor = mean * NORMAL_MIN_FRACTION
    for _ in range(NORMAL_MAX_REDRAWS):
        x = rng.gauss(mean, sigma)
        if x >= floor:
            return x
    return floor


# ---- sizes -------------------------------------------------------------------------------------

def thesis_fragments(rng: random.Random) -> int:
    """A message size in fragments from thesis Table 6.1."""
    u = rng.random()
    acc = 0.0
    for p, low, high in THESIS_SIZE_MIX:
        acc += p
        if u < acc:
            return low if low == high else _uniform_int(rng, low, high)
    _, low, high = THESIS_SIZE_MIX[-1]
    return _uniform_int(rng, low, high)


def _uniform_int(rng: random.Random, low: int, high: int) -> int:
    # rng.random() scaled: several times faster than randint, and the bias (< 2**-50) is irrelevant here
    return low + int(rng.random() * (high - low + 1))


def _size_sampler(size: SizeDist, base: Path, where: str) -> Callable[[random.Random], int]:
    if size.dist == "fixed":
        fixed = int(size.bytes)
        return lambda rng: fixed
    if size.dist == "empirical":
        values = read_sizes(_resolve(size.file, base), where)
        return lambda rng: rng.choice(values)
    fragment = int(size.fragment_size)
    return lambda rng: thesis_fragments(rng) * fragment


def _resolve(file: str, base: Path) -> Path:
    p = Path(file).expanduser()
    return p if p.is_absolute() else base / p


def read_sizes(path: Path, where: str = "size.file") -> list[int]:
    """Sizes in bytes, one per line ("1200" or "4KiB"); blank lines and '#' comments are skipped.

    Only a regular file of at most SIZE_FILE_MAX_BYTES is read (the loader refuses others already; a
    Scenario built in code, or a file swapped since, gets the same sentence): /dev/zero would never end."""
    problem = size_file_problem(path)
    if problem:
        raise ScenarioError(f"{where}.file: {problem}.")
    try:
        # O_NONBLOCK: a FIFO put there since the check must not hang the open; fstat checks what was opened.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as f:
            problem = size_file_stat_problem(path, os.fstat(fd))
            if problem:
                raise ScenarioError(f"{where}.file: {problem}.")
            data = f.read(SIZE_FILE_MAX_BYTES + 1)
        if len(data) > SIZE_FILE_MAX_BYTES:
            raise ScenarioError(f"{where}.file: the empirical size file {path} is larger than "
                                f"{SIZE_FILE_MAX_BYTES} bytes (64 MiB).")
        text = data.decode()
    except FileNotFoundError:
        raise ScenarioError(f"{where}.file: the empirical size file {path} does not exist.") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not readable text"
        raise ScenarioError(f"{where}.file: cannot read the empirical size file {path} ({reason}).") from None
    values: list[int] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        item = line.split("#", 1)[0].strip()
        if not item:
            continue
        try:
            value = units.parse_size(item)
        except ValueError:      # units.UnitError
            raise ScenarioError(f"{path}:{lineno}: expected a message size in bytes, got {item!r}.") from None
        if value <= 0:
            raise ScenarioError(f"{path}:{lineno}: expected a message size above zero, got {item!r}.")
        values.append(value)
    if not values:
        raise ScenarioError(f"{where}.file: the empirical size file {path} lists no sizes.")
    return values


# ---- recipients --------------------------------------------------------------------------------

def _recipient_chooser(rc: RecipientChoice, node: str,
                       nodes: list[str]) -> Callable[[random.Random], tuple[str, ...]] | None:
    """How `node` picks the recipients of one message; None when it has nobody to send to."""
    if rc.choice == "fixed":
        # all listed nodes receive every message (a multi-recipient message); never the sender itself
        fixed = tuple(n for n in rc.nodes if n != node and n in nodes)
        if not fixed:
            return None
        return lambda rng: fixed
    if rc.choice == "weighted":
        pairs = [(n, float(w)) for n, w in sorted(rc.weights.items()) if n != node and n in nodes and w > 0]
        if not pairs:
            return None
        names = [n for n, _ in pairs]
        cum: list[float] = []
        total = 0.0
        for _, w in pairs:
            total += w
            cum.append(total)

        def weighted(rng: random.Random) -> tuple[str, ...]:
            x = rng.random() * total
            for n, c in zip(names, cum):
                if x < c:
                    return (n,)
            return (names[-1],)
        return weighted
    # uniform over the other nodes; the thesis: "An MTA may not send a message to itself."
    others = [n for n in nodes if n != node]
    if not others:
        return None
    count = len(others)
    return lambda rng: (others[int(rng.random() * count)],)
