"""A deterministic simulation of broker liveness at the controller quorum: sessions, heartbeat
connections and fencing (docs/cluster.md, "Fencing a broker whose process died").

One seed decides everything: 2-5 brokers, 1 or 3 controllers (combined with brokers in one
process, or apart), message delays, the grace (broker.heartbeat.connection.loss.timeout.ms, or
off), and the faults: kill -9 of a broker (back within the grace, after a while, or much later),
SIGSTOP of a process (shorter or longer than a session), a broker's connections to the
controller reset while it lives, a link between a broker and a controller cut ("drop": closed
and refused; "stall": held, no FIN), a controlled shutdown, and controller failovers (the active
one resigns or dies). The controllers run QuorumController's own code, unchanged: register_broker,
broker_heartbeat, broker_connection_lost, seconds_until_a_session_expires, fence_expired_brokers
(over a metadata quorum that commits at once, shared by every controller). The brokers mirror
BrokerLifecycleManager's loop: register with retries, heartbeat every broker.heartbeat.interval.ms
(200 ms while fenced), again at once when a connection that had answered closes (its
`controller_connection_lost`), over one connection per controller (NodeChannels: opened on
first use, two round trips to connect, requests timed out after
controller.quorum.request.timeout.ms). The fencing timer mirrors the broker's: it sleeps as
seconds_until_a_session_expires says and wakes early when wait_for_a_session_deadline would.

INVARIANTS are checked after every event; the sim keeps its own record of what each controller
heard on which connection and when (a reference model) to judge the controller's decisions.
Then every fault heals and every broker must be registered with its running incarnation and
unfenced.

Replay one seed:  .venv/bin/python -m tests.unit.controller.broker_liveness_simulation --seed N
"""

from __future__ import annotations

import argparse
import heapq
import logging
import math
import random
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Literal

from kafka_ext.controller.cluster_control import IN_PROCESS, BrokerListener, HeartbeatAnswer
from kafka_ext.controller.image import MetadataImage
from kafka_ext.controller.quorum_controller import QuorumController
from kafka_ext.protocol.errors import ErrorCode, KafkaError
from kafka_ext.server import broker_lifecycle
from kafka_ext.server.config import BROKER_CONFIGS
from tests.unit.replication.simulation import run_now

# Kafka's defaults, in simulated ms.
HEARTBEAT_MS = 2000  # broker.heartbeat.interval.ms
SESSION_MS = 9000  # broker.session.timeout.ms
GRACE_DEFAULT_MS = int(str(BROKER_CONFIGS["broker.heartbeat.connection.loss.timeout.ms"].default))
REQUEST_TIMEOUT_MS = 2000  # controller.quorum.request.timeout.ms
RETRY_MS = int(broker_lifecycle.RETRY_BACKOFF_S * 1000)
AGAIN_MIN_MS = int(broker_lifecycle.HEARTBEAT_AGAIN_MIN_S * 1000)
SHUTDOWN_GIVE_UP_MS = int(broker_lifecycle.CONTROLLED_SHUTDOWN_TIMEOUT_S * 1000)
CONNECT_TRIPS = 4  # one-way delays to connect: TCP's round trip, then ApiVersions'
TIMER_SLACK_MS = 3  # the fencing timer wakes 1 ms past a deadline; ms rounding on top
CAUGHT_UP = 1 << 40  # brokers are always caught up with the metadata here
LISTENERS = [BrokerListener("PLAINTEXT", "sim", 9092, 0)]

INVARIANTS = {
    1: "every fence the timer commits is the active controller's and is justified by what "
       "that controller heard in its term: no heartbeat of the broker for a session (from "
       "the term's start), or the connection its registered incarnation last heartbeat on "
       "closed more than the grace ago (never a stale connection: one it left, or an earlier "
       "incarnation's)",
    2: "a broker whose process runs is never fenced through its connection unless something "
       "else stopped it from coming back in time: it was paused, its link to the controller "
       "was cut or reset again, (seeds where the grace outlasts six message delays)",
    3: "an incarnation whose process is gone is fenced (or replaced by a new registration) "
       "within the grace of its heartbeat connection's close reaching the active controller, "
       "and within a session of the last heartbeat that controller heard",
    4: "liveness: once every fault has healed, every broker is registered with its running "
       "incarnation and unfenced",
}


class InvariantViolation(AssertionError):
    def __init__(self, invariant: int, detail: str) -> None:
        super().__init__(f"invariant {invariant}: {detail}")
        self.invariant = invariant


# -- the controllers ---------------------------------------------------------------------------


class SimRaft:
    """What QuorumController asks of its quorum member: this node leads when the simulation made
    it the active controller; the term; the offset the next record takes (a broker epoch)."""

    def __init__(self, sim: Simulation, node_id: int) -> None:
        self.sim = sim
        self.node_id = node_id
        self.log = self
        self.state_machine: Any = None

    @property
    def is_leader(self) -> bool:
        return self.sim.active == self.node_id

    @property
    def epoch(self) -> int:
        return self.sim.term

    @property
    def log_end_offset(self) -> int:
        return self.sim.image.offset + 1


class SimController(QuorumController):
    """QuorumController itself, on the simulation's clock, over a quorum that commits at once."""

    def __init__(self, sim: Simulation, node_id: int, grace_ms: int) -> None:
        super().__init__(node_id, None, default_partitions=1, default_replication_factor=1,
                         validate_topic_config=lambda name, value: value,
                         run_blocking=_never, raft=SimRaft(sim, node_id),  # type: ignore[arg-type]
                         broker_session_timeout_ms=SESSION_MS,
                         broker_connection_loss_timeout_ms=grace_ms)
        self.sim = sim
        self.image = sim.image
        self.clock_ms = lambda: float(sim.now)  # type: ignore[method-assign]

    async def _commit(self, records: list[Any]) -> None:
        self.sim.commit(self, records)


async def _never(fn: Callable[[], Any]) -> Any:
    raise AssertionError("nothing blocks in the simulation")


# -- nodes, connections, requests --------------------------------------------------------------


@dataclass(eq=False)
class Conn:
    """One connection of a broker's heartbeat channel to a controller (hashable by identity:
    it is the key the controller watches)."""

    conn_id: int
    broker: int
    controller: int
    broker_incarnation: int
    controller_incarnation: int
    ready: bool = False  # connected (TCP and ApiVersions done)
    open_at_broker: bool = True
    open_at_controller: bool = True
    closing: bool = False  # its end is on its way to both sides
    last_up_ms: int = 0  # FIFO: the next message towards the controller arrives no earlier
    last_down_ms: int = 0  # and towards the broker
    waiting: list[Request] = field(default_factory=list)  # sent while connecting

    def __repr__(self) -> str:
        return f"conn{self.conn_id}({self.broker}->{self.controller})"


@dataclass(eq=False)
class Request:
    kind: Literal["register", "heartbeat"]
    broker_epoch: int
    want_shutdown: bool
    done: bool = False
    conn: Conn | None = None


@dataclass(eq=False)
class Node:
    """One process: a controller, a broker, or both (combined)."""

    node_id: int
    is_controller: bool
    is_broker: bool
    incarnation: int = 0
    running: bool = False
    paused: bool = False
    backlog: list[Callable[[], None]] = field(default_factory=list)
    controller: SimController | None = None
    timer_gen: int = 0
    # The broker's BrokerLifecycleManager, mirrored:
    incarnation_id: uuid.UUID = field(default_factory=uuid.uuid4)
    broker_epoch: int = -1
    fenced: bool = True
    heartbeat_started_ms: int = 0
    heartbeat_now: bool = False
    waiting_gen: int = -1  # the loop's pending wait (its wake-up carries this number)
    in_flight: Request | None = None
    want_shutdown: bool = False
    shutdown_started_ms: int = -1
    known_leader: int = -1
    known_term: int = 0
    conns: dict[int, Conn] = field(default_factory=dict)  # per controller node


@dataclass(slots=True)
class Heard:
    """What a controller heard of a broker in one term (the reference model)."""

    last_touch_ms: float = -math.inf  # any heartbeat, or a registration that committed
    watched: tuple[Hashable, int, int] | None = None  # (connection, broker epoch, when)


class Simulation:
    def __init__(self, seed: int, *, grace_ms: int | None = None, brokers: int | None = None,
                 controllers: int | None = None, combined: bool | None = None,
                 verbose: bool = False) -> None:
        self.seed = seed
        self.rng = rng = random.Random(seed)
        self.verbose = verbose
        self.grace_ms = grace_ms if grace_ms is not None else rng.choice(
            [GRACE_DEFAULT_MS] * 3 + [200, -1])
        broker_count = brokers if brokers is not None else rng.randint(2, 5)
        controller_count = controllers if controllers is not None else rng.choice([1, 3, 3])
        self.combined = combined if combined is not None else rng.random() < 0.5
        self.max_delay_ms = rng.choice([1, 5, 20, 60, 100])
        self.fault_gap_ms = rng.choice([1000, 3000, 6000])
        # Invariant 2 asks a live broker to come back in time: it learns of the close, waits
        # out HEARTBEAT_AGAIN_MIN_S at most, connects and heartbeats: six delays and that.
        self.strict_comeback = (self.grace_ms
                                > AGAIN_MIN_MS + (CONNECT_TRIPS + 2) * self.max_delay_ms)
        self.now = 0
        self.events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.image = MetadataImage()
        self.active: int | None = None
        self.term = 0
        self.term_started_ms = 0
        self.nodes: dict[int, Node] = {}
        controller_ids = list(range(1, controller_count + 1)) if self.combined else [
            100 + i for i in range(controller_count)]
        for node_id in sorted(set(range(1, broker_count + 1)) | set(controller_ids)):
            self.nodes[node_id] = Node(node_id, node_id in controller_ids,
                                       node_id <= broker_count)
        self.cuts: dict[tuple[int, int], str] = {}  # (broker, controller) -> "drop" | "stall"
        self.held: list[tuple[tuple[int, int], Callable[[], None]]] = []  # stalled messages
        self._conn_ids = 0
        # The reference model: (controller, term) -> broker -> Heard; closes the active
        # controller was told of; when its clocks were reset in a term.
        self.heard: dict[tuple[int, int], dict[int, Heard]] = {}
        self.closes: dict[tuple[int, int], dict[Conn, int]] = {}
        self.reset_ms: dict[tuple[int, int], int] = {}
        # Disturbances of a broker's comeback (invariant 2): pauses (start, end) and, per
        # controller, cuts (start, end) and resets (time).
        self.pauses: dict[int, list[tuple[int, int]]] = {}
        self.link_faults: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.epoch_owner: dict[tuple[int, int], int] = {}  # (broker, epoch) -> incarnation
        self._timer_fencing = False
        self._outcomes: dict[Request, Callable[[Any], None]] = {}  # requests in flight
        self.fences = {"connection": 0, "session": 0, "shutdown": 0}
        self.fenced: list[tuple[int, int, str]] = []  # (when, broker, why) of every fence
        self.trace: list[str] = []

    def describe(self) -> str:
        controllers = [n for n, node in self.nodes.items() if node.is_controller]
        brokers = [n for n, node in self.nodes.items() if node.is_broker]
        return (f"seed {self.seed}: brokers {brokers}, controllers {controllers} "
                f"({'combined' if self.combined else 'apart'}), grace {self.grace_ms} ms, "
                f"delay <= {self.max_delay_ms} ms")

    def note(self, text: str) -> None:
        self.trace.append(f"{self.now} {text}")

    def detail(self, text: Callable[[], str]) -> None:
        """A note for --verbose: every request, answer and connection."""
        if self.verbose:
            self.trace.append(f"{self.now}   {text()}")

    # -- scheduling --------------------------------------------------------------------------

    def at(self, time_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self.events, (time_ms, self._seq, action))

    def on_node(self, node: Node, delay_ms: int, action: Callable[[], None]) -> None:
        """Run `action` in the node's current process after `delay_ms` (late if paused)."""
        incarnation = node.incarnation

        def run() -> None:
            if not node.running or node.incarnation != incarnation:
                return
            if node.paused:
                node.backlog.append(action)
                return
            action()
            self._after_controller_action(node)

        self.at(self.now + delay_ms, run)

    def delay(self) -> int:
        return self.rng.randint(1, self.max_delay_ms)

    def _link(self, broker: int, controller: int, action: Callable[[], None],
              end_of_connection: bool = False) -> None:
        """Carry a message over the link now: held while it is stalled, lost while it drops
        (where a connection's end, a reset, still arrives)."""
        mode = self.cuts.get((broker, controller))
        if mode == "stall":
            self.held.append(((broker, controller), action))
        elif mode is None or end_of_connection:
            action()

    # -- the controllers' quorum ---------------------------------------------------------------

    def commit(self, controller: SimController, records: list[Any]) -> None:
        """The quorum commits at once what the active controller appends; NOT_CONTROLLER for
        any other. Invariant 1 on every fence the timer commits."""
        if self.active != controller.node_id:
            if self._timer_fencing:
                raise InvariantViolation(1, f"controller {controller.node_id} fenced while "
                                            f"{self.active} is the active one")
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "not the active controller")
        for record in records:
            if type(record).__name__ == "FenceBrokerRecord":
                self._check_fence(controller.node_id, record.id, record.epoch)
        self.image = self.image.apply_all(self.image.offset + 1,
                                          [(type(r).__name__, r) for r in records])
        for node in self.nodes.values():
            if node.controller is not None:
                node.controller.image = self.image

    def _start_controller(self, node: Node) -> None:
        node.controller = SimController(self, node.node_id, self.grace_ms)
        node.timer_gen += 1
        self._schedule_timer(node, 0)

    def _schedule_timer(self, node: Node, delay_ms: int) -> None:
        node.timer_gen += 1
        gen = node.timer_gen
        self.on_node(node, delay_ms, lambda: self._timer_fire(node, gen))

    def _timer_fire(self, node: Node, gen: int) -> None:
        """Broker._fence_expired_brokers_on_time: fence, then sleep as the controller says."""
        if gen != node.timer_gen or node.controller is None:
            return
        controller = node.controller
        self._timer_fencing = True
        try:
            run_now(controller.fence_expired_brokers())
        finally:
            self._timer_fencing = False
        controller._session_deadline_moved.clear()  # wait_for_a_session_deadline clears it
        sleep_s = controller.seconds_until_a_session_expires()
        self._schedule_timer(node, max(1, math.ceil(sleep_s * 1000)))

    def _after_controller_action(self, node: Node) -> None:
        """The timer's sleep ends early once the controller sets its deadline event; note when
        the active controller's clocks start a term."""
        controller = node.controller
        if controller is None:
            return
        if controller._session_deadline_moved.is_set():
            controller._session_deadline_moved.clear()
            self._schedule_timer(node, 0)
        key = (node.node_id, self.term)
        if (self.active == node.node_id and controller._heartbeats_epoch == self.term
                and key not in self.reset_ms):
            self.reset_ms[key] = self.now

    def _elect(self, delay_ms: int) -> None:
        """A new active controller among the running ones after `delay_ms` (none until then);
        each broker learns of it a little later."""
        self.active = None
        candidates = [n for n in self.nodes.values() if n.is_controller]

        def elect() -> None:
            if self.active is not None:
                return
            up = [n for n in candidates if n.running and not n.paused]
            if not up:
                self.at(self.now + 200, elect)
                return
            leader = self.rng.choice(up)
            self.term += 1
            self.active = leader.node_id
            self.term_started_ms = self.now
            self.note(f"controller {leader.node_id} is active in term {self.term}")
            for node in self.nodes.values():
                if node.is_broker:
                    self._learn_leader(node)

        self.at(self.now + delay_ms, elect)

    def _learn_leader(self, node: Node) -> None:
        term, leader = self.term, self.active
        if leader is None:
            return

        def learn() -> None:
            if term > node.known_term:
                node.known_term, node.known_leader = term, leader

        self.on_node(node, self.rng.randint(0, 1000), learn)

    # -- invariants ----------------------------------------------------------------------------

    def _heard(self, controller: int) -> dict[int, Heard]:
        return self.heard.setdefault((controller, self.term), {})

    def _check_fence(self, controller: int, broker_id: int, broker_epoch: int) -> None:
        if not self._timer_fencing:
            self.fences["shutdown"] += 1
            self.fenced.append((self.now, broker_id, "shutdown"))
            return
        key = (controller, self.term)
        heard = self.heard.get(key, {}).get(broker_id, Heard())
        # Not reset before: this very call reset the clocks, a full session from now.
        base = max(self.reset_ms.get(key, self.now), heard.last_touch_ms)
        by_session = self.now - base > SESSION_MS
        watched = heard.watched
        closed_ms = (self.closes.get(key, {}).get(watched[0]) if watched is not None
                     and watched[1] == broker_epoch else None)
        by_connection = (self.grace_ms >= 0 and closed_ms is not None
                         and self.now - closed_ms > self.grace_ms)
        self.note(f"controller {controller} fences broker {broker_id} (epoch {broker_epoch}): "
                  + ("session" if by_session else "connection" if by_connection else "??"))
        if not (by_session or by_connection):
            raise InvariantViolation(1, f"controller {controller} fenced broker {broker_id} "
                                        f"(epoch {broker_epoch}): last heard {base} ms, "
                                        f"watched {watched}, closed at {closed_ms}")
        why = "session" if by_session else "connection"
        self.fences[why] += 1
        self.fenced.append((self.now, broker_id, why))
        if by_session:
            return
        node = self.nodes[broker_id]
        alive = (node.running and self.epoch_owner.get((broker_id, broker_epoch))
                 == node.incarnation)
        assert closed_ms is not None
        if alive and self.strict_comeback and not self._disturbed(broker_id, controller,
                                                                  closed_ms):
            raise InvariantViolation(2, f"broker {broker_id} (epoch {broker_epoch}) runs, and "
                                        f"was fenced {self.now - closed_ms} ms after its "
                                        f"connection {watched} closed at {closed_ms} ms")

    def _disturbed(self, broker_id: int, controller: int, closed_ms: int) -> bool:
        """Whether the broker's comeback after a close at `closed_ms` may have been stopped:
        paused, its link to the controller cut, or reset more than once around then."""
        since = closed_ms - self.grace_ms - 10 * self.max_delay_ms
        if any(end >= since for _, end in self.pauses.get(broker_id, [])):
            return True
        faults = [f for f in self.link_faults.get((broker_id, controller), []) if f[1] >= since]
        return len(faults) >= 2 or any(start != end for start, end in faults)

    def check(self) -> None:
        """Invariant 3: a gone incarnation's deadlines at the active controller."""
        leader = self.nodes.get(self.active) if self.active is not None else None
        if leader is None or leader.paused or not leader.running:
            return
        key = (leader.node_id, self.term)
        heard = self.heard.get(key, {})
        for broker in self.image.brokers.values():
            if broker.fenced:
                continue
            node = self.nodes[broker.broker_id]
            owner = self.epoch_owner.get((broker.broker_id, broker.broker_epoch))
            if node.running and owner == node.incarnation:
                continue  # it lives
            seen = heard.get(broker.broker_id, Heard())
            if key in self.reset_ms:
                base = max(self.reset_ms[key], seen.last_touch_ms)
                if self.now > base + SESSION_MS + TIMER_SLACK_MS:
                    raise InvariantViolation(3, f"broker {broker.broker_id} (epoch "
                                                f"{broker.broker_epoch}) is gone and unfenced "
                                                f"a session after {base} ms")
            watched = seen.watched
            if watched is None or watched[1] != broker.broker_epoch or self.grace_ms < 0:
                continue
            closed_ms = self.closes.get(key, {}).get(watched[0])
            if closed_ms is not None and self.now > closed_ms + self.grace_ms + TIMER_SLACK_MS:
                raise InvariantViolation(3, f"broker {broker.broker_id} (epoch "
                                            f"{broker.broker_epoch}) is gone and unfenced "
                                            f"{self.now - closed_ms} ms after {watched[0]} "
                                            "closed")

    # -- the controller's side of requests and connections ------------------------------------

    def _at_controller(self, conn: Conn, request: Request) -> None:
        """A request arrives: QuorumController's answer goes back over the connection."""
        node = self.nodes[conn.controller]
        controller = node.controller
        if (not conn.open_at_controller or controller is None
                or node.incarnation != conn.controller_incarnation):
            return
        broker_id = conn.broker
        broker = self.nodes[broker_id]
        outcome: Any
        try:
            if request.kind == "register":
                epoch = run_now(controller.register_broker(
                    broker_id, broker.incarnation_id, LISTENERS, None, [], conn))
                outcome = ("registered", epoch)
                self.epoch_owner[(broker_id, epoch)] = conn.broker_incarnation
                self._model_heard(conn.controller, broker_id, conn, epoch)
            else:
                self._model_heard(conn.controller, broker_id, conn, request.broker_epoch)
                outcome = ("answer", run_now(controller.broker_heartbeat(
                    broker_id, request.broker_epoch, CAUGHT_UP, False, request.want_shutdown,
                    None, conn)))
        except KafkaError as exc:
            outcome = ("error", exc.code)
        self._answer(conn, request, outcome)

    def _model_heard(self, controller: int, broker_id: int, conn: Hashable,
                     epoch: int) -> None:
        """The reference model: every heartbeat arrival (any epoch) and every registration
        keeps the session; the active controller watches a connection of the registered
        incarnation."""
        heard = self._heard(controller).setdefault(broker_id, Heard())
        heard.last_touch_ms = self.now
        known = self.image.brokers.get(broker_id)
        if self.active == controller and known is not None and known.broker_epoch == epoch:
            heard.watched = (conn, epoch, self.now)

    def _controller_told_closed(self, conn: Conn) -> None:
        """KafkaConnection.connection_lost at the controller (read after what came before)."""
        node = self.nodes[conn.controller]
        if node.incarnation != conn.controller_incarnation:
            return

        def tell() -> None:
            if not conn.open_at_controller or node.controller is None:
                return
            conn.open_at_controller = False
            self.detail(lambda: f"controller {conn.controller} told {conn} closed")
            if self.active == conn.controller:
                self.closes.setdefault((conn.controller, self.term), {})[conn] = self.now
            node.controller.broker_connection_lost(conn)

        self.on_node(node, 0, tell)

    # -- the broker's side: BrokerLifecycleManager, mirrored -----------------------------------

    def _start_broker(self, node: Node) -> None:
        node.incarnation_id = uuid.UUID(int=self.rng.getrandbits(128))
        node.broker_epoch, node.fenced, node.heartbeat_started_ms = -1, True, 0
        node.heartbeat_now, node.in_flight, node.want_shutdown = False, None, False
        node.shutdown_started_ms = -1
        node.known_leader, node.known_term = -1, 0
        node.conns = {}
        self._learn_leader(node)
        self.on_node(node, 0, lambda: self._register(node))

    def _register(self, node: Node) -> None:
        def outcome(result: Any) -> None:
            if result[0] == "registered":
                node.broker_epoch = result[1]
                self.note(f"broker {node.node_id} registered (epoch {node.broker_epoch})")
                self._heartbeat(node)
            else:
                self.on_node(node, RETRY_MS, lambda: self._register(node))

        self._send(node, Request("register", -1, False), outcome)

    def _heartbeat(self, node: Node) -> None:
        """One turn of _heartbeat_loop."""
        node.heartbeat_now = False
        node.heartbeat_started_ms = self.now

        def outcome(result: Any) -> None:
            kind = result[0]
            self.detail(lambda: f"broker {node.node_id} heartbeat: {result}")
            if kind == "error":
                if result[1] in (ErrorCode.STALE_BROKER_EPOCH,
                                 ErrorCode.BROKER_ID_NOT_REGISTERED):
                    self._register(node)
                    return
            elif kind == "answer":
                answer: HeartbeatAnswer = result[1]
                node.fenced = answer.is_fenced
                if node.want_shutdown and answer.should_shut_down:
                    self.note(f"broker {node.node_id} finished its controlled shutdown")
                    self._exit(node)
                    return
            if (node.want_shutdown
                    and self.now - node.shutdown_started_ms > SHUTDOWN_GIVE_UP_MS):
                self._exit(node)
                return
            self._wait(node, RETRY_MS if node.fenced or node.want_shutdown else HEARTBEAT_MS)

        self._send(node, Request("heartbeat", node.broker_epoch, node.want_shutdown), outcome)

    def _wait(self, node: Node, wait_ms: int) -> None:
        if node.heartbeat_now:
            self._heartbeat_soon(node)
            return
        self._seq += 1
        node.waiting_gen = gen = self._seq

        def wake() -> None:
            if node.waiting_gen == gen:
                node.waiting_gen = -1
                self._heartbeat(node)

        self.on_node(node, wait_ms, wake)

    def _heartbeat_soon(self, node: Node) -> None:
        """The wait ends, asked for at once: HEARTBEAT_AGAIN_MIN_S after the last one began."""
        node.waiting_gen = -1
        again_ms = max(0, node.heartbeat_started_ms + AGAIN_MIN_MS - self.now)
        self.on_node(node, again_ms, lambda: self._heartbeat(node))

    def _broker_told_closed(self, conn: Conn) -> None:
        node = self.nodes[conn.broker]
        if node.incarnation == conn.broker_incarnation:
            self.on_node(node, 0, lambda: self._connection_lost_at_broker(node, conn))

    def _connection_lost_at_broker(self, node: Node, conn: Conn) -> None:
        """NodeConnection._fail: the request on it fails; controller_connection_lost."""
        if not conn.open_at_broker:
            return
        self._forget(node, conn)
        self.detail(lambda: f"broker {node.node_id} lost {conn}")
        if conn.ready and conn.controller == node.known_leader:
            node.heartbeat_now = True  # a connection that was open: not one still connecting
            if node.waiting_gen >= 0:
                self._heartbeat_soon(node)
        self._fail_requests_on(node, conn)

    def _forget(self, node: Node, conn: Conn) -> None:
        conn.open_at_broker = False
        if node.conns.get(conn.controller) is conn:
            del node.conns[conn.controller]

    def _fail_requests_on(self, node: Node, conn: Conn) -> None:
        failed = [r for r in [node.in_flight] if r is not None and r.conn is conn]
        failed += [r for r in conn.waiting if r not in failed]
        conn.waiting = []
        for request in failed:
            self._fail_request(node, request, ("connection",))

    def _refused(self, node: Node, conn: Conn) -> None:
        """A connect that fails: no connection was made, so none is lost."""
        if conn.open_at_broker:
            conn.open_at_controller = False
            self._forget(node, conn)
            self._fail_requests_on(node, conn)

    def _send(self, node: Node, request: Request, outcome: Callable[[Any], None]) -> None:
        """BrokerLifecycleManager.to_controller: in process when this node leads, else over the
        heartbeat channel's connection to the leader it knows, timed out after the request
        timeout."""
        node.in_flight = request
        request_outcome = outcome

        def finish(result: Any) -> None:
            if not request.done:
                request.done = True
                if node.in_flight is request:
                    node.in_flight = None
                request_outcome(result)

        if node.is_controller and self.active == node.node_id and node.controller is not None:
            controller = node.controller
            try:
                if request.kind == "register":
                    epoch = run_now(controller.register_broker(
                        node.node_id, node.incarnation_id, LISTENERS, None, [], IN_PROCESS))
                    self.epoch_owner[(node.node_id, epoch)] = node.incarnation
                    self._model_heard(node.node_id, node.node_id, IN_PROCESS, epoch)
                    result: Any = ("registered", epoch)
                else:
                    self._model_heard(node.node_id, node.node_id, IN_PROCESS,
                                      request.broker_epoch)
                    result = ("answer", run_now(controller.broker_heartbeat(
                        node.node_id, request.broker_epoch, CAUGHT_UP, False,
                        request.want_shutdown, None, IN_PROCESS)))
            except KafkaError as exc:
                result = ("error", exc.code)
            self.on_node(node, 0, lambda: finish(result))
            return
        target = node.known_leader
        if target < 0:
            self.on_node(node, 0, lambda: finish(("error", ErrorCode.NOT_CONTROLLER)))
            return
        self._outcomes[request] = finish
        conn = node.conns.get(target)
        if conn is None:
            conn = self._connect(node, target)
        self.detail(lambda: f"broker {node.node_id} sends {request.kind} on {conn}")
        request.conn = conn
        if conn.ready:
            self._transmit(conn, request)
        else:
            conn.waiting.append(request)
        self.on_node(node, REQUEST_TIMEOUT_MS, lambda: self._fail_request(
            node, request, ("timeout",)))

    def _fail_request(self, node: Node, request: Request, result: Any) -> None:
        if request.conn is not None and request in request.conn.waiting:
            request.conn.waiting.remove(request)
        finish = self._outcomes.pop(request, None)
        if finish is not None and not request.done:
            self.on_node(node, 0, lambda: finish(result))

    def _connect(self, node: Node, target: int) -> Conn:
        """NodeChannels._connect: refused at once when the peer is down or the link drops,
        held while it stalls."""
        self._conn_ids += 1
        peer = self.nodes[target]
        conn = Conn(self._conn_ids, node.node_id, target, node.incarnation, peer.incarnation)
        node.conns[target] = conn
        trips = sum(self.delay() for _ in range(CONNECT_TRIPS))
        link = (node.node_id, target)

        def connected() -> None:
            if not conn.open_at_broker:
                return
            if not peer.running or peer.incarnation != conn.controller_incarnation:
                self._refused(node, conn)
                return
            conn.ready = True
            waiting, conn.waiting = conn.waiting, []
            for request in waiting:
                self._transmit(conn, request)

        def attempt() -> None:
            mode = self.cuts.get(link)
            if mode == "stall":
                self.held.append((link, lambda: self.on_node(node, 0, attempt)))
            elif mode == "drop" or not peer.running:
                self.on_node(node, 2 * self.delay(), lambda: self._refused(node, conn))
            else:
                self.on_node(node, trips, connected)

        attempt()
        return conn

    def _transmit(self, conn: Conn, request: Request) -> None:
        """The request travels to the controller in order; answered in order."""
        arrival = max(self.now + self.delay(), conn.last_up_ms)
        conn.last_up_ms = arrival
        controller = self.nodes[conn.controller]

        def deliver() -> None:
            self._link(conn.broker, conn.controller,
                       lambda: self.on_node(controller, 0,
                                            lambda: self._at_controller(conn, request)))

        self.at(arrival, deliver)

    def _answer(self, conn: Conn, request: Request, outcome: Any) -> None:
        arrival = max(self.now + self.delay(), conn.last_down_ms)
        conn.last_down_ms = arrival
        broker = self.nodes[conn.broker]

        def deliver() -> None:
            def at_broker() -> None:
                finish = self._outcomes.pop(request, None)
                if conn.open_at_broker and finish is not None:
                    finish(outcome)

            self._link(conn.broker, conn.controller, lambda: self.on_node(broker, 0, at_broker))

        self.at(arrival, deliver)

    # -- faults ---------------------------------------------------------------------------------

    def _close_both_ways(self, conn: Conn) -> None:
        """A connection ends (FIN or RST): each side learns it after a delay, after what was
        sent before it (held while the link stalls)."""
        if conn.closing:
            return
        conn.closing = True
        for told in (self._broker_told_closed, self._controller_told_closed):
            def deliver(told: Callable[[Conn], None] = told) -> None:
                self._link(conn.broker, conn.controller, lambda: told(conn),
                           end_of_connection=True)

            self.at(max(self.now + self.delay(), conn.last_up_ms, conn.last_down_ms), deliver)

    def _open_conns(self, broker: int | None = None, controller: int | None = None
                    ) -> list[Conn]:
        conns = []
        for node in self.nodes.values():
            for conn in node.conns.values():
                if ((broker is None or conn.broker == broker)
                        and (controller is None or conn.controller == controller)):
                    conns.append(conn)
        return conns

    def kill(self, node: Node) -> None:
        """kill -9: its sockets close (the peers learn after a delay), everything else stops."""
        if not node.running:
            return
        self.note(f"kill {node.node_id}")
        self._exit(node)

    def _exit(self, node: Node) -> None:
        conns = self._open_conns(broker=node.node_id) + self._open_conns(controller=node.node_id)
        for conn in conns:
            if node.node_id == conn.broker:
                conn.open_at_broker = False
            self._close_both_ways(conn)
        node.running = node.paused = False
        node.backlog = []
        node.conns = {}
        node.in_flight = None
        if node.controller is not None:
            node.controller = None
            if self.active == node.node_id:
                self._elect(self.rng.randint(50, 2000))

    def restart(self, node: Node) -> None:
        if node.running:
            return
        self.note(f"start {node.node_id}")
        node.incarnation += 1
        node.running, node.paused, node.backlog = True, False, []
        if node.is_controller:
            self._start_controller(node)
        if node.is_broker:
            self._start_broker(node)

    def pause(self, node: Node, duration_ms: int) -> None:
        if not node.running or node.paused:
            return
        self.note(f"pause {node.node_id} for {duration_ms} ms")
        node.paused = True
        self.pauses.setdefault(node.node_id, []).append((self.now, self.now + duration_ms))
        incarnation = node.incarnation
        if self.active == node.node_id:
            self._elect(self.rng.randint(500, 2000))  # the others stop hearing from it
        self.at(self.now + duration_ms, lambda: self.resume(node, incarnation))

    def resume(self, node: Node, incarnation: int) -> None:
        if node.incarnation != incarnation or not node.running or not node.paused:
            return
        self.note(f"resume {node.node_id}")
        node.paused = False
        backlog, node.backlog = node.backlog, []
        for action in backlog:  # what came due meanwhile, in order
            if node.running and node.incarnation == incarnation:
                action()
                self._after_controller_action(node)
                self.check()

    def reset_connections(self, node: Node) -> None:
        """A live broker's connections to the controllers are reset (RST); new ones work."""
        conns = self._open_conns(broker=node.node_id)
        if not node.running or not conns:
            return
        self.note(f"reset the connections of broker {node.node_id}")
        for conn in conns:
            self.link_faults.setdefault((conn.broker, conn.controller), []).append(
                (self.now, self.now))
            self._close_both_ways(conn)

    def cut(self, broker: int, controller: int, mode: str, duration_ms: int) -> None:
        link = (broker, controller)
        if link in self.cuts:
            return
        self.note(f"cut {broker} -> {controller} ({mode}) for {duration_ms} ms")
        self.cuts[link] = mode
        self.link_faults.setdefault(link, []).append((self.now, self.now + duration_ms))
        if mode == "drop":  # a firewall that rejects: both ends are reset
            for conn in self._open_conns(broker=broker, controller=controller):
                self._close_both_ways(conn)
        self.at(self.now + duration_ms, lambda: self.heal(link))

    def heal(self, link: tuple[int, int] | None = None) -> None:
        healed = [link] if link is not None else list(self.cuts)
        for each in healed:
            if self.cuts.pop(each, None) is not None:
                self.note(f"heal {each[0]} -> {each[1]}")
        held, self.held = self.held, []
        for where, action in held:
            if where in self.cuts:
                self.held.append((where, action))
            else:
                self.at(self.now + self.delay(), action)

    def controlled_shutdown(self, node: Node) -> None:
        if not node.running or node.paused or node.broker_epoch < 0 or node.want_shutdown:
            return
        self.note(f"controlled shutdown of broker {node.node_id}")
        node.want_shutdown = True
        node.shutdown_started_ms = self.now
        if node.waiting_gen >= 0:
            node.waiting_gen = -1
            self.on_node(node, 0, lambda: self._heartbeat(node))

    def resign(self) -> None:
        """The active controller hands over (a Raft election it loses, EndQuorumEpoch)."""
        if self.active is None:
            return
        self.note(f"controller {self.active} resigns")
        self._elect(self.rng.randint(50, 1500))

    # -- the run --------------------------------------------------------------------------------

    def _schedule_faults(self, until_ms: int) -> None:
        rng = self.rng
        time_ms = 0
        brokers = [n for n in self.nodes.values() if n.is_broker]
        controllers = [n for n in self.nodes.values() if n.is_controller]
        while True:
            time_ms += rng.randint(self.fault_gap_ms // 4, self.fault_gap_ms)
            if time_ms >= until_ms:
                return
            node = rng.choice(brokers)
            kind = rng.random()
            if kind < 0.25:  # kill -9, back within the grace, after a while, or much later
                back = rng.choice([rng.randint(0, max(self.grace_ms, 1)),
                                   rng.randint(500, 4000), rng.randint(10000, 20000)])
                self.at(time_ms, lambda n=node: self.kill(n))
                self.at(time_ms + back, lambda n=node: self.restart(n))
            elif kind < 0.4:  # shorter or longer than a session
                pause_ms = rng.choice([rng.randint(100, 3000), rng.randint(8000, 14000)])
                self.at(time_ms, lambda n=node, d=pause_ms: self.pause(n, d))
            elif kind < 0.6:  # the broker lives; its connection drops
                self.at(time_ms, lambda n=node: self.reset_connections(n))
            elif kind < 0.75:
                controller = rng.choice(controllers)
                mode = rng.choice(["drop", "stall"])
                duration = rng.choice([rng.randint(100, 3000), rng.randint(8000, 14000)])
                self.at(time_ms, lambda b=node.node_id, c=controller.node_id, m=mode,
                        d=duration: self.cut(b, c, m, d))
            elif kind < 0.82:
                self.at(time_ms, lambda n=node: self.controlled_shutdown(n))
                self.at(time_ms + rng.randint(3000, 8000), lambda n=node: self.restart(n))
            elif kind < 0.92:
                self.at(time_ms, self.resign)
            else:
                controller = rng.choice(controllers)
                self.at(time_ms, lambda c=controller: self.kill(c))
                self.at(time_ms + rng.randint(500, 5000), lambda c=controller: self.restart(c))

    def run_until(self, end_ms: int, stop: Callable[[], bool] | None = None) -> None:
        while self.events and self.events[0][0] <= end_ms:
            time_ms, _, action = heapq.heappop(self.events)
            self.now = max(self.now, time_ms)
            action()
            self.check()
            if stop is not None and stop():
                return
        self.now = max(self.now, end_ms)

    def run(self, fault_ms: int = 60000, heal_ms: int = 40000,
            random_faults: bool = True) -> None:
        """Faults for `fault_ms` (the seed's, and those scheduled with `at`), then every one
        healed: within `heal_ms` every broker must be registered with its running incarnation
        and unfenced (invariant 4)."""
        for node in self.nodes.values():
            self.restart(node)
        self._elect(0)
        if random_faults:
            self._schedule_faults(fault_ms)
        self.run_until(fault_ms)
        self.note("heal everything")
        self.heal()
        for node in self.nodes.values():
            self.resume(node, node.incarnation)
            if node.want_shutdown:
                node.want_shutdown = False  # as if it had stopped and come back
                self._exit(node)
            self.restart(node)
        if self.active is None or not self.nodes[self.active].running:
            self._elect(0)
        self.run_until(fault_ms + heal_ms, self.settled)
        if not self.settled():
            raise InvariantViolation(4, f"not settled {heal_ms} ms after healing: "
                                        f"{self.describe_state()}")

    def settled(self) -> bool:
        for node in self.nodes.values():
            if not node.is_broker:
                continue
            known = self.image.brokers.get(node.node_id)
            if (known is None or known.fenced or known.incarnation_id != node.incarnation_id
                    or node.fenced):
                return False
        return True

    def describe_state(self) -> str:
        parts = []
        for node in self.nodes.values():
            if node.is_broker:
                known = self.image.brokers.get(node.node_id)
                state = ("unregistered" if known is None else "fenced" if known.fenced
                         else "unfenced")
                parts.append(f"{node.node_id}: {state}, epoch {node.broker_epoch}, leader "
                             f"{node.known_leader}")
        return f"active {self.active} term {self.term}; " + "; ".join(parts)

    def summary(self) -> str:
        return (f"{self.describe()}: ok, {self.term} terms, fences by connection "
                f"{self.fences['connection']}, by session {self.fences['session']}, "
                f"controlled shutdowns {self.fences['shutdown']}")


def run_seed(seed: int, **options: Any) -> Simulation:
    """Run one seed; a violation names the command that replays it."""
    sim = Simulation(seed, **options)
    try:
        sim.run()
    except InvariantViolation as exc:
        trace = "\n    ".join(sim.trace[-14:])
        raise InvariantViolation(
            exc.invariant, f"{exc}\n  {sim.describe()}, after:\n    {trace}\n  replay: "
            f".venv/bin/python -m tests.unit.controller.broker_liveness_simulation --seed "
            f"{seed} --trace") from exc
    return sim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, default=1, help="run seeds seed..seed+count-1")
    parser.add_argument("--trace", action="store_true", help="print the whole trace")
    parser.add_argument("--verbose", action="store_true",
                        help="the trace tells every request, answer and connection too")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the controller's fencing warnings
    failed = 0
    for seed in range(args.seed, args.seed + args.count):
        sim = Simulation(seed, verbose=args.verbose)
        error: AssertionError | None = None
        try:
            sim.run()
        except AssertionError as exc:
            error = exc
        if args.trace or args.verbose:
            print("\n".join(sim.trace))
        failed += error is not None
        print(sim.summary() if error is None
              else f"{sim.describe()}: FAILED at {sim.now} ms: {error}")
    if failed:
        raise SystemExit(f"{failed} seed(s) failed")


if __name__ == "__main__":
    main()
