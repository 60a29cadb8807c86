"""Fuzzing every gRPC service of a live node, far longer than `make test` does (issue: hardening).

The same structure-aware fuzzer as tests/integration/node/test_node_fuzz.py (strategies, network and rules in
tests/integration/node/fuzz_strategies.py): Link sessions as a fake neighbour (good OPEN then random and mutated
fragments, runs, acks, refusals, credits, keepalives, link-state adverts, interest records, publications; and
bad first batches), every Submit, Control and PubSub call (Subscribe as scripted streams) with valid and
mutated requests, and bytes that do not decode for every method; and the attacks on the trust defences
(tests/integration/node/fuzz_trust.py): subscription takeover and listing by another user, plaintext to the TLS
ports, certificates clients must refuse, forged and replayed link probes, calls without a valid token, pieces
arriving after expiry. One network (n1 - n2, n3 alone with dynamic routing; tls and auth on) for the whole run.

Rounds: each round runs every target for its test-suite number of examples (BASE_EXAMPLES: fuzz_strategies' and
fuzz_trust's; the trust targets' are small in the test suite, so a round runs TRUST_FACTOR times as many) with
a fresh random seed, so rounds explore different inputs; between rounds a canary message n1 -> n2 goes out and
every node must answer Health. `--scale K` runs K rounds (default 20: twenty times `make test`); `--minutes M`
runs rounds until M minutes have passed instead. A target whose example breaks a rule stops for that round
(hypothesis shrinks the input first and the minimal one is printed); the next round carries on.

At the end: every message a node accepted (Sends, canaries, the fake neighbour's complete messages the node
acked) must be in its mailbox exactly once, every node healthy, no crash in any node.log. Prints
`name: measured / bound = ratio` lines; exits 1 when a problem was found. Known bugs (xfailed in the test
module, outside the files the fuzzer may fix) are counted apart and do not fail the run; `--uncapped` also lets
the Link fuzzer send a node its own interest / link-state record with the last sequence number, which finds two
of them.
"""
from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration" / "node"))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

import fuzz_strategies as fs  # noqa: E402
import fuzz_trust as ft  # noqa: E402

TRUST_FACTOR = 5
TARGETS = {**fs.TARGETS, **ft.TARGETS}
BASE_EXAMPLES = {**fs.BASE_EXAMPLES, **{k: v * TRUST_FACTOR for k, v in ft.BASE_EXAMPLES.items()}}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_target(fz: fs.Fuzzer, name: str, examples: int, rnd: int, uncapped: bool) -> str | None:
    """One hypothesis run of one target; the problem it found (after shrinking), or None."""
    make, drive = TARGETS[name]
    strategy = fs.link_scripts(real_cap=False) if uncapped and name == "link" else make()

    @seed(rnd)
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False, print_blob=False,
              suppress_health_check=list(HealthCheck))
    @given(example=strategy)
    def run(example) -> None:
        fz.run(name, drive(fz, example))

    try:
        run()
    except Exception as exc:          # FuzzFailure, or whatever else broke the harness: both are findings
        return f"{name}: {type(exc).__name__}: {exc}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=20, help="rounds, each one `make test`'s examples (default 20)")
    ap.add_argument("--minutes", type=float, help="run rounds for this long instead of --scale rounds")
    ap.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated, of {', '.join(TARGETS)}")
    ap.add_argument("--examples", type=float, default=1.0, help="factor on the examples per target and round")
    ap.add_argument("--uncapped", action="store_true", help="let Link records of a node's own carry any sequence "
                                                            "number (finds known bugs that break that node)")
    ap.add_argument("--seed", type=int, help="first round's seed (default: random)")
    ap.add_argument("--keep", help="keep the network's directory (node logs, spools) here")
    args = ap.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        ap.error(f"unknown target {unknown[0]!r}")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_fuzz_"))
    rng = random.Random(args.seed)
    problems: list[str] = []
    t0 = time.monotonic()
    deadline = t0 + args.minutes * 60 if args.minutes else None
    rounds = 0
    net = fs.build_network(work)
    fz = fs.Fuzzer(net)
    try:
        fz.canary("before the fuzzing")
        while (deadline is None and rounds < args.scale) or (deadline is not None and time.monotonic() < deadline):
            rounds += 1
            for name in targets:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                rnd = rng.randrange(1 << 32)
                before, first = fz.stats["examples"], len(fz.problems)
                found = run_target(fz, name, max(1, round(BASE_EXAMPLES[name] * args.examples)), rnd,
                                   args.uncapped)
                log(f"round {rounds} {name} (seed {rnd}): {fz.stats['examples'] - before} examples"
                    + (f"; PROBLEM {found.splitlines()[0][:300]}" if found else ""))
                if found:
                    # the first failing input as drawn, too: a bug that leaves the node broken makes every later
                    # replay fail, and hypothesis then shrinks towards an input that merely meets the broken node
                    drawn = fz.problems[first] if len(fz.problems) > first else ""
                    if drawn and drawn not in found:
                        found += f"\n    first failing input as drawn: {drawn}"
                    problems.append(f"round {rounds}, seed {rnd}: {found}")
            try:
                fz.healthy()
                fz.canary(f"after round {rounds}")
            except fs.FuzzFailure as exc:
                problems.append(f"after round {rounds}: {exc}")
                break
        try:
            fz.verify(timeout=60)
        except fs.FuzzFailure as exc:
            problems.append(f"delivery: {exc}")
        try:
            fz.healthy()
        except fs.FuzzFailure as exc:
            problems.append(f"health at the end: {exc}")
        log_lines = fz.log_problems()
    finally:
        fz.close()
        net.close()
        if not args.keep and not problems:
            shutil.rmtree(work, ignore_errors=True)
    secs = time.monotonic() - t0
    st = fz.stats
    judged = st["answers"] - st["known"]
    per = ", ".join(f"{t} {st[f'examples:{t}']}" for t in targets)
    print(f"fuzz: {rounds} rounds, {st['examples']} examples in {secs:.0f} s ({st['examples'] / secs:.0f}/s): {per}")
    print(f"fuzz answered with a clear status: {st['clear']} / {judged} = {st['clear'] / max(1, judged):.2f} "
          f"(bound 1.00)")
    print(f"fuzz unknown/internal statuses (escaped exceptions): {st['unclear']} / 0")
    print(f"fuzz answers other than the input calls for: {st['wrong']} / 0")
    print(f"fuzz hangs: {st['hangs']} / 0")
    print(f"fuzz crashes: {st['crashes']} / 0")
    acc = st["accepted_messages"]
    print(f"fuzz accepted messages delivered exactly once: {st['delivered_once']} / {acc} = "
          f"{st['delivered_once'] / max(1, acc):.2f} (bound 1.00)")
    print(f"fuzz node.log crash lines: {len(log_lines)} / 0")
    print(f"fuzz link fragments answered: {st['Link fragments acked']} acked + {st['Link fragments refused']} refused "
          f"(every one of {st['Link fragments acked'] + st['Link fragments refused']} sent on a live session)")
    print(f"fuzz accepted: Send {st['Submit/Send accepted']} (refused {st['Submit/Send refused']}), Publish "
          f"{st['PubSub/Publish accepted']} (refused {st['PubSub/Publish refused']}); Subscribe streams started "
          f"{st['Subscribe subscribed']}, publications delivered on them {st['Subscribe publications delivered']}")
    print(f"fuzz refused messages found in a mailbox: {st['refused_delivered']} / 0 (of {st['refused_messages']} "
          f"late pieces' messages and calls a node refused)")
    intact = st["takeover owners' streams intact"]
    print(f"fuzz takeover: owners' streams intact after the attacks {intact}; "
          f"attaches refused {st['takeover attaches refused']}, removals refused {st['takeover removals refused']}")
    print(f"fuzz plaintext to TLS ports: calls {st['plaintext calls refused']}, raw connections "
          f"{st['plaintext raw connections refused']}, none answered")
    print(f"fuzz certificates refused: by clients {st['certificates refused by clients']}, by nodes "
          f"{st['certificates refused by nodes']}")
    print(f"fuzz forged probe datagrams refused: {st['forged probes refused']} / {st['forged probes sent']}")
    print(f"fuzz calls without a valid token refused: {st['tokenless calls refused']} (slowest "
          f"{st['tokenless slowest ms']} ms; {st['tokenless statuses lost to a write race']} large Subscribe starts "
          f"cut off by the refusal, their status lost in the client)")
    print(f"fuzz late pieces refused: {st['late pieces refused']}; late copies of taken messages acked as "
          f"duplicates {st['late duplicates acked']}")
    if fz.known_hits:
        print("fuzz known bugs hit (xfailed in tests/integration/node/test_node_fuzz.py): "
              + ", ".join(f"{k} {v}" for k, v in sorted(fz.known_hits.items())))
    codes = Counter({k: v for k, v in fz.codes.items()})
    print("fuzz statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(codes.items())))
    for line in log_lines[:20]:
        print(f"  log: {line}")
    print(f"fuzz problems found: {len(problems)} / 0")
    for p in problems:
        print(f"  PROBLEM {p[:3000]}")
    if problems:
        print(f"  node files kept in {work}")
    return 1 if problems or log_lines else 0


if __name__ == "__main__":
    sys.exit(main())
