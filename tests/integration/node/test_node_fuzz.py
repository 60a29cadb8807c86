"""A fuzzer for every gRPC service of the node, against live daemons (structure-aware, with hypothesis).

Link.Session (as a fake neighbour: good OPEN then random and mutated frames; bad first batches), Submit (Send,
Status, ListMailbox, DeleteMail), Control (Stats, Drain, SetRoutes, Health, GetRoutes, SetRules), Gateway
(GetGateway, SetGateway, RequestUser, at n3), PubSub
(Publish, Subscribe streams, Unsubscribe, ListSubscriptions), Pools (GetPools; malformed `_pools.*` control
publications at the consumer n1 and the replica n3), and bytes that do not decode for every method. The
strategies, the network and the rules every example must keep are in fuzz_strategies.py (shared with
bench/bench_fuzz.py, which runs the same fuzzing far longer). Then the attacks on the trust defences
(fuzz_trust.py): subscription takeover and listing by another user, plaintext to the TLS ports, certificates a
client must refuse, forged and replayed link probes, calls without a valid token, pieces arriving after expiry.

One network for the module, with tls and auth on (n1 - n2, and n3 alone with dynamic routing; n1 and n3 wait
for a neighbour "a0" that the fuzzer plays). Bounded to well under a minute: the example counts are
fuzz_strategies.BASE_EXAMPLES and fuzz_trust.BASE_EXAMPLES, times the environment variable WANBED_FUZZ_EXAMPLES
(a factor, default 1; e.g. WANBED_FUZZ_EXAMPLES=10 for a longer run).
Examples are derandomized (the same inputs on every run) and nothing is stored between runs.

The tests of the bugs it found outside the request handlers (a unary request that does not decode, an OPEN
with a huge name, a sequence number that cannot be counted past) come last: before their fixes they left a
node broken.
"""
from __future__ import annotations

import asyncio
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, example, given, settings

import fuzz_strategies as fs
import fuzz_trust as ft
from node.codec import SEQ_MAX
from node.rpc import control_pb2, gateway_pb2, link_pb2, link_pb2_grpc, pubsub_pb2, submit_pb2

pytestmark = pytest.mark.timeout(900)
SCALE = float(os.environ.get("WANBED_FUZZ_EXAMPLES", "1") or 1)
BASE_EXAMPLES = {**fs.BASE_EXAMPLES, **ft.BASE_EXAMPLES}


def fuzz_settings(target: str):
    return settings(max_examples=max(1, round(BASE_EXAMPLES[target] * SCALE)), deadline=None, derandomize=True,
                    database=None, suppress_health_check=list(HealthCheck), print_blob=False)


@pytest.fixture(scope="module")
def fz(request: pytest.FixtureRequest):
    work = Path(tempfile.mkdtemp(prefix="wanbed-fuzz-"))
    failed_before = request.session.testsfailed
    net = fs.build_network(work)
    fuzzer = fs.Fuzzer(net)
    try:
        fuzzer.canary("before the fuzzing")
        yield fuzzer
    finally:
        fuzzer.close()
        net.close()
        if request.session.testsfailed > failed_before:
            print(f"fuzzing network files kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def test_submit_service(fz: fs.Fuzzer) -> None:
    fz.canary("submit")

    @fuzz_settings("submit")
    @given(call=fs.submit_calls())
    # regressions (node/mailbox.py): a page token JSON can parse but not as a number (an integer too big for a
    # float), or not at all (nested deeper than the parser's recursion limit): both escaped as UNKNOWN
    @example(call=fs.Call("n1", "Submit/ListMailbox",
                          submit_pb2.MailboxRequest(page_token="[1" + "0" * 400 + ',"a","b"]')))
    @example(call=fs.Call("n1", "Submit/ListMailbox", submit_pb2.MailboxRequest(page_token="[" * 100_000)))
    # regression (node/services.py): a status message repeating a long id went over the client's 16 KiB metadata
    # limit, which then answered RESOURCE_EXHAUSTED 'received metadata size exceeds hard limit' instead
    @example(call=fs.Call("n1", "Submit/Status", submit_pb2.StatusRequest(msg_id="\u00e9" * 5000)))
    def run(call: fs.Call) -> None:
        fz.run("submit", fs.drive_call(fz, call))

    run()
    fz.healthy()


def test_control_service(fz: fs.Fuzzer) -> None:
    fz.canary("control")

    @fuzz_settings("control")
    @given(call=fs.control_calls())
    # regression (node/services.py): rules_json nested deeper than the JSON parser's recursion limit escaped as
    # UNKNOWN (RecursionError is not a ValueError)
    @example(call=fs.Call("n1", "Control/SetRules", control_pb2.SetRulesRequest(rules_json="[" * 100_000)))
    def run(call: fs.Call) -> None:
        fz.run("control", fs.drive_call(fz, call))

    run()
    fz.healthy()


def test_gateway_service(fz: fs.Fuzzer) -> None:
    fz.canary("gateway")

    @fuzz_settings("gateway")
    @given(call=fs.gateway_calls())
    @example(call=fs.Call("n3", "Gateway/SetGateway", gateway_pb2.SetGatewayRequest(gamma=math.nan)))
    @example(call=fs.Call("n3", "Gateway/RequestUser", gateway_pb2.UserRequest(user="alice", throughput=math.inf)))
    def run(call: fs.Call) -> None:
        fz.run("gateway", fs.drive_call(fz, call))

    run()
    fz.healthy()


def test_pubsub_service(fz: fs.Fuzzer) -> None:
    fz.canary("pubsub")

    @fuzz_settings("pubsub")
    @given(call=fs.pubsub_calls())
    # regression (node/broker/service.py): the NOT_FOUND of a long name went over the client's metadata limit
    @example(call=fs.Call("n1", "PubSub/Unsubscribe", pubsub_pb2.UnsubscribeRequest(name="\u00e9" * 5000)))
    def run(call: fs.Call) -> None:
        fz.run("pubsub", fs.drive_call(fz, call))

    run()
    fz.healthy()


def test_subscribe_streams(fz: fs.Fuzzer) -> None:
    fz.canary("subscribe")

    @fuzz_settings("subscribe")
    @given(script=fs.subscribe_scripts())
    # regression (node/broker/service.py): a message after `start` that is not an ack or close ended the stream
    # with CANCELLED, the code of a cancelled call (the client library takes it for its own close)
    @example(script=fs.SubscribeScript("n1", pubsub_pb2.SubscribeRequest(start=pubsub_pb2.SubscribeStart(pattern="a")),
                                       [("bad", pubsub_pb2.SubscribeRequest())], "close"))
    @example(script=fs.SubscribeScript("n1", pubsub_pb2.SubscribeRequest(start=pubsub_pb2.SubscribeStart(pattern="a")),
                                       [("bad", b"\xff\xfe")], "close"))
    def run(script: fs.SubscribeScript) -> None:
        fz.run("subscribe", fs.drive_subscribe(fz, script))

    run()
    fz.healthy()


def test_link_session_openings(fz: fs.Fuzzer) -> None:
    @fuzz_settings("link_open")
    @given(lo=fs.link_opens())
    def run(lo: fs.LinkOpen) -> None:
        fz.run("link_open", fs.drive_link_open(fz, lo))

    run()
    fz.healthy()


def test_link_sessions_with_random_frames(fz: fs.Fuzzer) -> None:
    fz.canary("link")

    @fuzz_settings("link")
    @given(script=fs.link_scripts())
    def run(script: fs.LinkScript) -> None:
        fz.run("link", fs.drive_link(fz, script))

    run()
    fz.healthy()


def test_bytes_that_are_no_request(fz: fs.Fuzzer) -> None:
    fz.canary("raw")

    @fuzz_settings("raw")
    @given(rc=fs.raw_calls())
    def run(rc: fs.RawCall) -> None:
        fz.run("raw", fs.drive_raw(fz, rc))

    run()
    fz.healthy()


def test_get_pools(fz: fs.Fuzzer) -> None:
    @fuzz_settings("pools_get")
    @given(pc=fs.pools_calls())
    def run(pc: fs.PoolsCall) -> None:
        fz.run("pools_get", fs.drive_pools_call(fz, pc))

    run()
    fz.healthy()


def test_malformed_pools_control_publications(fz: fs.Fuzzer) -> None:
    """Each one the node reading it (n1's consumer, n3's controller replica) refuses and counts, and its map
    stays as it was."""
    before, maps = fs.pools_refusals(fz), fs.pools_maps(fz)
    published = {n: fz.stats[f"pools {n} published"] for n in ("n1", "n3")}

    @fuzz_settings("pools_control")
    @given(pp=fs.pool_publications())
    def run(pp: fs.PoolPublication) -> None:
        fz.run("pools_control", fs.drive_pool_publication(fz, pp))

    run()
    want = {n: before[n] + fz.stats[f"pools {n} published"] - published[n] for n in before}
    assert all(want[n] > before[n] for n in want), want
    deadline = time.monotonic() + 10
    while fs.pools_refusals(fz) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    assert fs.pools_refusals(fz) == want
    assert fs.pools_maps(fz) == maps
    fz.healthy()


# -- the trust defences (fuzz_trust.py) ---------------------------------------------------------------------
def run_trust(fz: fs.Fuzzer, target: str) -> None:
    make, drive = ft.TARGETS[target]

    @fuzz_settings(target)
    @given(example=make())
    def run(example) -> None:
        fz.run(target, drive(fz, example))

    run()
    fz.healthy()


def test_another_users_subscription_can_be_neither_taken_nor_seen(fz: fs.Fuzzer) -> None:
    run_trust(fz, "takeover")
    assert fz.stats["takeover owners' streams intact"] > 0


def test_plaintext_to_a_tls_port_gets_no_answer(fz: fs.Fuzzer) -> None:
    run_trust(fz, "plaintext")
    assert fz.stats["plaintext calls refused"] and fz.stats["plaintext raw connections refused"]


def test_clients_refuse_a_certificate_of_another_ca_or_name(fz: fs.Fuzzer) -> None:
    run_trust(fz, "certs")
    assert fz.stats["certificates refused by clients"] and fz.stats["certificates refused by nodes"]


def test_forged_and_replayed_probes_change_no_cost(fz: fs.Fuzzer) -> None:
    run_trust(fz, "probes")
    assert fz.stats["forged probes refused"] == fz.stats["forged probes sent"] > 0


def test_calls_without_a_valid_token_are_refused_before_their_request(fz: fs.Fuzzer) -> None:
    run_trust(fz, "tokens")
    assert fz.stats["tokenless calls refused"]


def test_pieces_arriving_after_their_lifetime_are_refused(fz: fs.Fuzzer) -> None:
    fz.canary("late")
    run_trust(fz, "late")
    assert fz.stats["late pieces refused"]


def test_every_accepted_message_arrives_once_and_no_node_crashed(fz: fs.Fuzzer) -> None:
    """After all the fuzzing: the canaries and every message a node accepted are delivered exactly once, none a
    node had to refuse (late pieces, calls without a token or over a refused certificate) is in a mailbox, every
    node is healthy and no node.log shows a crash (a traceback, an ERROR line, a session failing on an
    exception), apart from the known bugs' lines."""
    fz.canary("after the fuzzing")
    total = fz.verify()
    assert total >= 8                 # the canaries at least
    assert fz.stats["refused_messages"] > 0 and fz.stats["refused_delivered"] == 0
    fz.healthy()
    assert fz.log_problems() == []


# -- regressions: bugs the fuzzer found outside the files it could fix (fixed since; each test failed before) ----
def test_a_unary_request_that_does_not_decode_gets_invalid_argument(fz: fs.Fuzzer) -> None:
    async def go() -> list[tuple[str, grpc.StatusCode]]:
        out = []
        for method in sorted(fs.UNARY):
            node = "n3" if method.startswith("Gateway/") else "n1"      # the gateway is n3's
            code, _details, _ = await fs._unary(fz, node, method, b"\xff\xfe", raw=True)
            out.append((method, code))
        return out
    got = fz.loop.run_until_complete(go())
    assert [m for m, code in got if code != grpc.StatusCode.INVALID_ARGUMENT] == []


async def _fake_session_survives(fz: fs.Fuzzer, node: str, frame: link_pb2.Frame) -> bool:
    """Send `frame` as a0 on a fresh session, then a probe fragment: True when the probe is refused (the session
    outlived the frame) and a second session afterwards gets its probe refused too."""
    for send in (frame, None):
        call = link_pb2_grpc.LinkStub(fz.data(node)).Session(timeout=20)
        try:
            await call.write(fs.open_batch(fs.FAKE, node))
            reply = await asyncio.wait_for(call.read(), 10)
            if reply is grpc.aio.EOF:
                return False
            frames = [send] if send is not None else []
            frames.append(link_pb2.Frame(fragment=link_pb2.Fragment(seq=fs.PROBE_SEQ, total_size=1, data=b"?", hops=1)))
            await call.write(link_pb2.FrameBatch(frames=frames))
            while True:
                got = await asyncio.wait_for(call.read(), 5)
                if got is grpc.aio.EOF:
                    return False
                if any(f.WhichOneof("kind") == "refuse" and f.refuse.seq == fs.PROBE_SEQ for f in got.frames):
                    break
        except (grpc.aio.AioRpcError, asyncio.TimeoutError, asyncio.InvalidStateError):
            return False
        finally:
            call.cancel()
    return True


def test_an_open_with_a_long_name_is_refused_with_a_readable_status(fz: fs.Fuzzer) -> None:
    async def go() -> list[grpc.StatusCode]:
        out = []
        for o in (link_pb2.Open(node="\u00e9" * 5000, peer="n1", version=1),
                  link_pb2.Open(node=fs.FAKE, peer="x" * 20_000, version=1)):
            call = link_pb2_grpc.LinkStub(fz.data("n1")).Session(timeout=10)
            try:
                await call.write(link_pb2.FrameBatch(frames=[link_pb2.Frame(open=o)]))
                await call.read()
                out.append(grpc.StatusCode.OK)
            except grpc.aio.AioRpcError as exc:
                out.append(exc.code())
            finally:
                call.cancel()
        return out
    assert fz.loop.run_until_complete(go()) == [grpc.StatusCode.PERMISSION_DENIED] * 2


def test_an_interest_record_with_the_last_sequence_number_does_not_break_sessions(fz: fs.Fuzzer) -> None:
    # n1 (not n3): each of these two bugs leaves its victim's sessions broken, so each needs its own node
    frame = link_pb2.Frame(interest=link_pb2.Interest(origin="n1", seq=SEQ_MAX, age=0.0))
    assert fz.loop.run_until_complete(_fake_session_survives(fz, "n1", frame))


def test_a_link_state_advert_with_the_last_sequence_number_does_not_break_sessions(fz: fs.Fuzzer) -> None:
    frame = link_pb2.Frame(link_state=link_pb2.LinkState(origin="n3", seq=SEQ_MAX, age=0.0))
    assert fz.loop.run_until_complete(_fake_session_survives(fz, "n3", frame))
