"""Hostile clients: what the broker holds is bounded by what clients actually sent.

Fifty connections at a time abuse one broker (plaintext, TLS, and SASL before login) while a
stock confluent-kafka producer and consumer exchange numbered messages on their own
connections; the broker's resident memory (VmRSS) is sampled throughout. DESIGN.md principle
10 and docs/security.md "Limits": a size prefix costs nothing until its bytes arrive, request
bytes read and queued share `queued.max.request.bytes`, a client that has not logged in is
held to `sasl.server.max.receive.size`, and memory goes back once the connections close.
Connections themselves are bounded by `max.connections` and `max.connections.per.ip`.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from kafka_ext.client.probe import read_response
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.framing import encode_request
from kafka_ext.protocol.messages import registry
from kafka_ext.security.sasl import SaslClient
from tests.integration.conftest import BrokerProcess, free_port, serve_for_module
from tests.integration.test_bad_input import SteadyTraffic
from tests.integration.test_metrics import Samples, scrape, value
from tests.tls_material import TlsMaterial, make_tls_material

ADVERSARIES = 50
# The broker-wide budget these tests run with (the default is 256 MiB).
QUEUED_MAX_REQUEST_BYTES = 128 << 20  # at least socket.request.max.bytes, as Kafka requires
PREFIX_ONLY_BYTES = 100 << 20  # socket.request.max.bytes, the default
STALLED_FRAME_BYTES = 16 << 20  # each adversary sends 90 % of a frame this large, then stalls
SASL_MAX_RECEIVE_BYTES = 524288  # Kafka's default sasl.server.max.receive.size
# Stated bounds on the broker's RSS above its level before the adversaries came.
PREFIX_ONLY_GROWTH_BYTES = 24 << 20  # 50 prefixes: a few KiB per connection, no frame memory
# The budget, the finishers' overdraft (one largest request), one read of overdraft and the
# guaranteed 64 KiB per connection, the pooled buffers (32 MiB at most), and the bystanders' own
# churn: 720 MiB were offered.
STALLED_GROWTH_BYTES = QUEUED_MAX_REQUEST_BYTES + PREFIX_ONLY_BYTES + (64 << 20)
# How near its start RSS must come back once the adversaries have gone, and how soon.
RETURNED_GROWTH_BYTES = 24 << 20
RETURN_TIMEOUT_S = 20.0
SEND_TIMEOUT_S = 5.0  # an adversary stops pushing after this long (it is muted by then)
# Client listeners (SSL, SASL_PLAINTEXT) may hold this many connections together; the PLAINTEXT
# listener is the inter-broker one here and does not count, as in Kafka.
MAX_CONNECTIONS = 60
LIMITED_ADDRESS = "127.0.0.2"  # max.connections.per.ip.overrides gives it this many
LIMITED_ADDRESS_CONNECTIONS = 3
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret";')
_reg = registry()


@dataclass
class HostileBroker:
    broker: BrokerProcess
    tls: TlsMaterial
    ports: dict[str, int] = field(default_factory=dict)
    metrics_url: str = ""

    @property
    def metrics(self) -> Samples:
        return scrape(self)  # type: ignore[arg-type]  # it only reads metrics_url

    def rss_bytes(self) -> int:
        assert self.broker.proc is not None and self.broker.proc.poll() is None, "broker died"
        with open(f"/proc/{self.broker.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileBroker]:
    root = tmp_path_factory.mktemp("memory-bounds")
    tls = make_tls_material(root / "certs")
    broker = BrokerProcess(root / "data")
    ports = {"SSL": free_port(), "SASL_PLAINTEXT": free_port()}
    metrics_port = free_port()
    broker.overrides.update({
        "listeners": ",".join([f"PLAINTEXT://127.0.0.1:{broker.port}",
                               *(f"{name}://127.0.0.1:{port}" for name, port in ports.items())]),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "ssl.keystore.location": str(tls.broker.keystore),
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": JAAS,
        "queued.max.request.bytes": str(QUEUED_MAX_REQUEST_BYTES),
        "prometheus.metrics.port": str(metrics_port),
        "prometheus.metrics.host": "127.0.0.1",
        "max.connections": str(MAX_CONNECTIONS),
        "max.connections.per.ip.overrides": f"{LIMITED_ADDRESS}:{LIMITED_ADDRESS_CONNECTIONS}",
    })
    for started in serve_for_module(broker):
        yield HostileBroker(started, tls, ports, f"http://127.0.0.1:{metrics_port}/metrics")


@pytest.fixture
def traffic(hostile: HostileBroker) -> Iterator[SteadyTraffic]:
    steady = SteadyTraffic(hostile.broker)
    steady.wait_for_progress()
    yield steady
    steady.close()


class Adversary:
    """One connection that sends `payload` and then sits there; pushes from its own thread,
    since a muted connection's sends block."""

    def __init__(self, hostile: HostileBroker, listener: str, payload: bytes,
                 log_in: bool = False) -> None:
        port = hostile.broker.port if listener == "PLAINTEXT" else hostile.ports[listener]
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if listener == "SSL":
            context = ssl.create_default_context(cafile=str(hostile.tls.ca))
            sock = context.wrap_socket(sock, server_hostname="localhost")
        if log_in:
            _log_in(sock)
        self.sock = sock
        self.sent = 0
        self._payload = payload
        self.thread = threading.Thread(target=self._push, daemon=True)
        self.thread.start()

    def _push(self) -> None:
        self.sock.settimeout(0.2)
        view = memoryview(self._payload)
        deadline = time.monotonic() + SEND_TIMEOUT_S
        while self.sent < len(view) and time.monotonic() < deadline:
            try:
                self.sent += self.sock.send(view[self.sent:self.sent + (256 << 10)])
            except (TimeoutError, ssl.SSLWantWriteError):
                continue
            except OSError:
                return  # closed by the broker

    def closed_by_broker(self) -> bool:
        self.sock.settimeout(5)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            return True
        except TimeoutError:
            return False

    def close(self, reset: bool = False) -> None:
        """Close; `reset`: with an RST, as a client's kernel does when it gives up. A client
        muted by the broker has unsent bytes queued, and its FIN waits behind them: the
        broker cannot see that close before connections.max.idle.ms (Kafka cannot either)."""
        self.thread.join(timeout=SEND_TIMEOUT_S + 5)
        if reset:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


def _log_in(sock: socket.socket) -> None:
    handshake = _reg.requests[ApiKey.SASL_HANDSHAKE].cls(mechanism="PLAIN")
    sock.sendall(encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, "hostile", handshake))
    assert read_response(sock, ApiKey.SASL_HANDSHAKE, 1)[1].error_code == 0
    token = SaslClient("PLAIN", "alice", "alice-secret").first()
    authenticate = _reg.requests[ApiKey.SASL_AUTHENTICATE].cls(auth_bytes=token)
    sock.sendall(encode_request(ApiKey.SASL_AUTHENTICATE, 2, 2, "hostile", authenticate))
    assert read_response(sock, ApiKey.SASL_AUTHENTICATE, 2)[1].error_code == 0


def _prefix(size: int) -> bytes:
    return struct.pack(">i", size)


def _stalled_frame(size: int) -> bytes:
    """The size prefix and the first 90 % of a frame of `size` bytes."""
    return _prefix(size) + b"\x00" * (size * 9 // 10)


def _under_attack(hostile: HostileBroker, traffic: SteadyTraffic, bound_bytes: int,
                  start_rss: int) -> int:
    """While the adversaries push and sit, the bystanders keep going and RSS stays under the
    bound; returns the highest growth seen."""
    peak = 0
    deadline = time.monotonic() + SEND_TIMEOUT_S + 2
    while time.monotonic() < deadline:
        peak = max(peak, hostile.rss_bytes() - start_rss)
        assert peak < bound_bytes, f"broker RSS grew by {peak >> 20} MiB"
        traffic.wait_for_progress(5)
        time.sleep(0.2)
    return peak


@contextlib.contextmanager
def _adversaries(make: Callable[[], Adversary], reset: bool = False) -> Iterator[list[Adversary]]:
    """ADVERSARIES of them; closed on the way out whatever happened (with an RST: `reset`)."""
    adversaries: list[Adversary] = []
    try:
        adversaries.extend(make() for _ in range(ADVERSARIES))
        yield adversaries
    finally:
        for adversary in adversaries:
            adversary.close(reset)


def _after_they_leave(hostile: HostileBroker, start_rss: int) -> None:
    deadline = time.monotonic() + RETURN_TIMEOUT_S
    while (growth := hostile.rss_bytes() - start_rss) > RETURNED_GROWTH_BYTES:
        assert time.monotonic() < deadline, (
            f"broker RSS still {growth >> 20} MiB above its start {RETURN_TIMEOUT_S}s after "
            "the connections closed")
        time.sleep(0.5)


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_fifty_bare_100_mib_prefixes_cost_no_frame_memory(hostile: HostileBroker,
                                                         traffic: SteadyTraffic,
                                                         listener: str) -> None:
    start_rss = hostile.rss_bytes()
    with _adversaries(lambda: Adversary(hostile, listener, _prefix(PREFIX_ONLY_BYTES))) as them:
        _under_attack(hostile, traffic, PREFIX_ONLY_GROWTH_BYTES, start_rss)
        assert all(a.sent == 4 for a in them)
    _after_they_leave(hostile, start_rss)
    traffic.finish()


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_fifty_stalled_large_frames_hold_no_more_than_the_budget(hostile: HostileBroker,
                                                               traffic: SteadyTraffic,
                                                               listener: str) -> None:
    start_rss = hostile.rss_bytes()
    payload = _stalled_frame(STALLED_FRAME_BYTES)
    with _adversaries(lambda: Adversary(hostile, listener, payload), reset=True) as them:
        _under_attack(hostile, traffic, STALLED_GROWTH_BYTES, start_rss)
        _assert_muted(hostile, them, len(payload))
    _after_they_leave(hostile, start_rss)
    assert value(hostile.metrics, "kafka_network_socketserver_memorypoolmutedconnections") == 0
    traffic.finish()


def _assert_muted(hostile: HostileBroker, adversaries: list[Adversary], wanted: int) -> None:
    """The pool is spent, connections wait for it, and many adversaries could not even hand
    their kernel all they wanted to send (what kernels' socket buffers take is beyond any
    broker's say)."""
    metrics = hostile.metrics
    used = value(metrics, "kafka_network_socketserver_memorypoolused")
    assert QUEUED_MAX_REQUEST_BYTES <= used < QUEUED_MAX_REQUEST_BYTES + PREFIX_ONLY_BYTES + (
        24 << 20)
    assert value(metrics, "kafka_network_socketserver_memorypoolavailable") == 0
    assert value(metrics, "kafka_network_socketserver_memorypoolmutedconnections") >= 10
    blocked = sum(a.sent < wanted for a in adversaries)
    assert blocked >= 10, f"only {blocked} adversaries were held back"


def test_before_login_a_frame_over_the_sasl_limit_closes_at_its_prefix(
        hostile: HostileBroker, traffic: SteadyTraffic) -> None:
    over = [Adversary(hostile, "SASL_PLAINTEXT", _prefix(size))
            for size in (SASL_MAX_RECEIVE_BYTES + 1, PREFIX_ONLY_BYTES)]
    assert all(a.closed_by_broker() for a in over)
    logged_in = Adversary(hostile, "SASL_PLAINTEXT", _prefix(SASL_MAX_RECEIVE_BYTES + 1),
                          log_in=True)
    assert not logged_in.closed_by_broker()  # after login, socket.request.max.bytes applies
    for adversary in [*over, logged_in]:
        adversary.close()
    traffic.wait_for_progress(5)
    traffic.finish()


def test_fifty_stalled_frames_before_login_stay_under_the_sasl_limit(
        hostile: HostileBroker, traffic: SteadyTraffic) -> None:
    start_rss = hostile.rss_bytes()
    payload = _stalled_frame(SASL_MAX_RECEIVE_BYTES)
    with _adversaries(lambda: Adversary(hostile, "SASL_PLAINTEXT", payload)):
        # At most 50 x 460 KiB arrive; the budget is not even reached.
        _under_attack(hostile, traffic, ADVERSARIES * SASL_MAX_RECEIVE_BYTES + (24 << 20),
                      start_rss)
    _after_they_leave(hostile, start_rss)
    traffic.finish()


# -- connection limits ---------------------------------------------------------------------------


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))


def _served(sock: socket.socket) -> bool:
    """Whether the broker answers ApiVersions on `sock` (else it closed it)."""
    request = _reg.requests[ApiKey.API_VERSIONS].cls(client_software_name="limits",
                                                      client_software_version="1")
    try:
        sock.sendall(encode_request(ApiKey.API_VERSIONS, 3, 1, "limits", request))
        return read_response(sock, ApiKey.API_VERSIONS, 3)[1].error_code == 0
    except (ConnectionError, OSError, EOFError):
        return False


def test_an_address_past_its_per_ip_override_is_closed_and_others_are_not(
        hostile: HostileBroker) -> None:
    port = hostile.broker.port
    kept = [_connect(port, LIMITED_ADDRESS) for _ in range(LIMITED_ADDRESS_CONNECTIONS)]
    try:
        assert all(_served(sock) for sock in kept)
        with _connect(port, LIMITED_ADDRESS) as extra:
            assert not _served(extra)
        with _connect(port) as other:
            assert _served(other)
        kept.pop().close()
        deadline = time.monotonic() + 10
        while True:  # the broker counts the close once it has seen it
            with _connect(port, LIMITED_ADDRESS) as again:
                if _served(again):
                    break
            assert time.monotonic() < deadline, "a freed slot was never given out again"
            time.sleep(0.1)
    finally:
        for sock in kept:
            sock.close()


def test_client_listeners_past_max_connections_are_closed_but_the_broker_listener_is_not(
        hostile: HostileBroker) -> None:
    port = hostile.ports["SASL_PLAINTEXT"]
    kept: list[socket.socket] = []
    try:
        while len(kept) <= MAX_CONNECTIONS:
            sock = _connect(port)
            kept.append(sock)
            if not _served(sock):
                break
        served = len(kept) - 1
        # Other tests' connections may still hold a few, so the refusal comes at the limit or
        # a little before it.
        assert not _served(kept[-1])
        assert MAX_CONNECTIONS - 10 <= served <= MAX_CONNECTIONS, served
        with _connect(hostile.broker.port) as broker_listener:
            assert _served(broker_listener)
    finally:
        for sock in kept:
            sock.close()
