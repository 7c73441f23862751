"""ClientQuotaManager: enforces client quotas on this broker (KIP-13, KIP-55, KIP-219, KIP-599).

Mirrors Kafka's ClientQuotaManager, ClientRequestQuotaManager and ControllerMutationQuotaManager:
one manager per quota type, each keeps a sampled rate (Kafka's Rate over `quota.window.num`
windows of `quota.window.size.seconds`) per quota bucket, and answers a throttle time when a
recorded value takes the rate above the bound: X = (O - T) / T * W, for observed rate O, quota
T and the rate's window W. The controller mutation quota is a token bucket (KIP-599).

Which quota applies follows Kafka's precedence, most specific first:
/config/users/<user>/clients/<client-id>, /config/users/<user>/clients/<default>,
/config/users/<user>, /config/users/<default>/clients/<client-id>,
/config/users/<default>/clients/<default>, /config/users/<default>,
/config/clients/<client-id>, /config/clients/<default>. Clients that resolve to the same
quota entity share one rate (all clients of a user under a user quota).

Cost on the unthrottled path: a manager with no quota is one attribute test (`enabled`); a
client no quota applies to is one dict lookup (its resolution is cached). Guarded by the
event loop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Generator, Mapping
from typing import TYPE_CHECKING, Any

from kafka_ext.controller.client_quota_control import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    QuotaEntity,
)
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kafka_ext.server.dispatcher import RequestContext

# The user principal of a connection that did not authenticate (Kafka's KafkaPrincipal.ANONYMOUS).
ANONYMOUS = "ANONYMOUS"
# Kafka: a quota sensor idle this long is dropped.
INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000
# Bound on cached (user, client-id) resolutions and on sensors before idle ones are dropped.
_MAX_CACHED = 10_000
NANOS_TO_PERCENTAGE = 100.0 / 1e9


class _Default:
    """The `<default>` entity name of a user or client-id quota."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"


DEFAULT = _Default()
EntityPart = str | _Default | None  # None: the entity type is absent
QuotaKey = tuple[EntityPart, EntityPart]  # (user, client-id)


def java_round(x: float) -> int:
    """Java's Math.round (half up), which Kafka's throttle time uses."""
    return math.floor(x + 0.5)


class _Sample:
    __slots__ = ("start_ms", "last_event_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0


class SampledRate:
    """Kafka's Rate over a WindowedSum: the sum of `num_samples` (+1 overlapping) windows of
    `window_ms`, divided by their elapsed time, counted as at least `num_samples - 1` windows."""

    __slots__ = ("num_samples", "window_ms", "_samples", "_current")

    def __init__(self, num_samples: int, window_ms: int) -> None:
        self.num_samples = num_samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.last_event_ms = now_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % (self.num_samples + 1)
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def rate_and_window_ms(self, now_ms: int) -> tuple[float, int]:
        """(rate per second, the window it is measured over), in one pass over the samples:
        samples idle for the whole window are reset first (Kafka's purgeObsoleteSamples)."""
        samples = self._samples
        if not samples:
            samples.append(_Sample(now_ms))
        expire_age = self.num_samples * self.window_ms
        total = 0.0
        oldest = now_ms
        for sample in samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(now_ms)
            total += sample.value
            if sample.start_ms < oldest:
                oldest = sample.start_ms
        elapsed = now_ms - oldest
        full_windows = elapsed // self.window_ms
        if full_windows < self.num_samples - 1:
            elapsed += (self.num_samples - 1 - full_windows) * self.window_ms
        window_ms = max(elapsed, 1)
        return total / (window_ms / 1000), window_ms

    def measure(self, now_ms: int) -> float:
        """The rate per second."""
        return self.rate_and_window_ms(now_ms)[0]


class TokenBucket:
    """Kafka's TokenBucket (KIP-599): refills at the quota rate up to a burst of
    `num_samples * window` seconds of it; starts full; may go negative."""

    __slots__ = ("tokens", "last_update_ms")

    def __init__(self) -> None:
        self.tokens = 0.0
        self.last_update_ms = 0

    def measure(self, rate: float, burst: float, now_ms: int) -> float:
        self.tokens = min(burst, self.tokens + rate * (now_ms - self.last_update_ms) / 1000)
        self.last_update_ms = now_ms
        return self.tokens

    def record(self, value: float, rate: float, burst: float, now_ms: int) -> None:
        self.tokens = min(burst, self.measure(rate, burst, now_ms) - value)


class QuotaSensor:
    """The rate (or bucket) of one quota bucket and its bound; shared by the clients that
    resolve to it."""

    __slots__ = ("bound", "rate", "bucket", "last_record_ms")

    def __init__(self, bound: float, num_samples: int, window_ms: int) -> None:
        self.bound = bound
        self.rate = SampledRate(num_samples, window_ms)
        self.bucket = TokenBucket()
        self.last_record_ms = 0


class ClientQuotaManager:
    """Quotas of one key (e.g. producer_byte_rate) and the sensors that enforce them."""

    def __init__(self, quota_key: str, num_samples: int, window_seconds: int,
                 max_throttle_time_ms: int | None = None) -> None:
        self.quota_key = quota_key
        self.num_samples = num_samples
        self.window_ms = window_seconds * 1000
        self.max_throttle_time_ms = max_throttle_time_ms
        self.enabled = False  # any quota of this key configured: the unthrottled fast path
        self._quotas: dict[QuotaKey, float] = {}
        self._user_quotas = self._client_quotas = self._user_client_quotas = False
        self._sensors: dict[tuple[str, str], QuotaSensor] = {}
        self._resolved: dict[tuple[str, str], QuotaSensor | None] = {}

    # -- configuration ----------------------------------------------------------------------

    def update_quotas(self, quotas: Mapping[QuotaKey, float]) -> None:
        """Replace the configured quotas; live sensors take their new bound, and the rate
        they measured so far is kept (Kafka updates the metric config in place)."""
        self._quotas = dict(quotas)
        self.enabled = bool(self._quotas)
        self._user_quotas = any(u is not None and c is None for u, c in self._quotas)
        self._client_quotas = any(u is None and c is not None for u, c in self._quotas)
        self._user_client_quotas = any(u is not None and c is not None for u, c in self._quotas)
        self._resolved.clear()
        for tags, sensor in list(self._sensors.items()):
            bound = self.quota_limit(*tags)
            if bound is None:
                del self._sensors[tags]
            else:
                sensor.bound = bound

    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """The (user, client-id) bucket a client's usage is recorded in: Kafka's
        DefaultQuotaCallback.quotaMetricTags ("" where the level does not use that part)."""
        levels = (self._user_quotas, self._client_quotas, self._user_client_quotas)
        if levels == (False, True, False) or not any(levels):
            return "", client_id
        if levels == (True, False, False):
            return user, ""
        if levels == (False, False, True):
            return user, client_id
        q = self._quotas
        if ((user, client_id) in q or (user, DEFAULT) in q):
            return user, client_id
        if (user, None) in q:
            return user, ""
        if (DEFAULT, client_id) in q or (DEFAULT, DEFAULT) in q:
            return user, client_id
        if (DEFAULT, None) in q:
            return user, ""
        return "", client_id

    def quota_limit(self, user_tag: str, client_tag: str) -> float | None:
        """The bound of a bucket, looked up in precedence order; None if no quota applies."""
        q = self._quotas
        found: float | None = None
        if user_tag and client_tag:
            for key in ((user_tag, client_tag), (user_tag, DEFAULT), (DEFAULT, client_tag),
                        (DEFAULT, DEFAULT)):
                found = q.get(key)
                if found is not None:
                    break
        elif user_tag:
            found = q.get((user_tag, None))
            if found is None:
                found = q.get((DEFAULT, None))
        elif client_tag:
            found = q.get((None, client_tag))
            if found is None:
                found = q.get((None, DEFAULT))
        return found

    def quota(self, user: str, client_id: str) -> float | None:
        """The quota that applies to a client, or None (tests and tools)."""
        return self.quota_limit(*self.metric_tags(user, client_id))

    def sensor(self, user: str, client_id: str) -> QuotaSensor | None:
        """The sensor a client records into; None when no quota applies to it (cached)."""
        key = (user, client_id)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        tags = self.metric_tags(user, client_id)
        bound = self.quota_limit(*tags)
        sensor = None
        if bound is not None:
            sensor = self._sensors.get(tags)
            if sensor is None:
                if len(self._sensors) >= _MAX_CACHED:
                    self._expire_sensors()
                sensor = self._sensors[tags] = QuotaSensor(bound, self.num_samples,
                                                           self.window_ms)
        if len(self._resolved) >= _MAX_CACHED:
            self._resolved.clear()
        self._resolved[key] = sensor
        return sensor

    def _expire_sensors(self) -> None:
        newest = max((s.last_record_ms for s in self._sensors.values()), default=0)
        self._sensors = {t: s for t, s in self._sensors.items()
                         if newest - s.last_record_ms < INACTIVE_SENSOR_EXPIRATION_MS}
        self._resolved.clear()

    # -- recording --------------------------------------------------------------------------

    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float,
                                        now_ms: int) -> int:
        """Record `value`; the time the client must wait for its rate to be back at its quota
        (0 when within it)."""
        sensor = self.sensor(user, client_id)
        if sensor is None:
            return 0
        sensor.last_record_ms = now_ms
        rate = sensor.rate
        rate.record(value, now_ms)
        observed, window_ms = rate.rate_and_window_ms(now_ms)
        if observed <= sensor.bound:
            return 0
        throttle = java_round((observed - sensor.bound) / sensor.bound * window_ms)
        if self.max_throttle_time_ms is not None:
            throttle = min(throttle, self.max_throttle_time_ms)
        return throttle

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch answers without its data)."""
        sensor = self.sensor(user, client_id)
        if sensor is not None:
            sensor.rate.record(-value, now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most a client may take at once without a certain throttle (caps fetch sizes)."""
        bound = self.quota(user, client_id)
        if bound is None:
            return None
        return bound * (self.num_samples - 1) * self.window_ms / 1000


class ControllerMutationQuotaManager(ClientQuotaManager):
    """KIP-599: partition mutations (created, deleted, added) per second, as a token bucket."""

    def _burst(self, sensor: QuotaSensor) -> float:
        return self.num_samples * self.window_ms / 1000 * sensor.bound

    def _throttle_time_ms(self, tokens: float, sensor: QuotaSensor) -> int:
        return java_round(-tokens / sensor.bound * 1000)

    def record_strict(self, user: str, client_id: str, permits: float, now_ms: int) -> int:
        """Strict (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+): refuse, without
        recording, once the bucket is empty; the throttle time, or 0 when accepted."""
        sensor = self.sensor(user, client_id)
        if sensor is None:
            return 0
        sensor.last_record_ms = now_ms
        burst = self._burst(sensor)
        tokens = sensor.bucket.measure(sensor.bound, burst, now_ms)
        if tokens < 0:
            return self._throttle_time_ms(tokens, sensor)
        sensor.bucket.record(permits, sensor.bound, burst, now_ms)
        return 0

    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float,
                                        now_ms: int) -> int:
        """Permissive (older versions): always accept, throttle once the bucket is empty."""
        sensor = self.sensor(user, client_id)
        if sensor is None:
            return 0
        sensor.last_record_ms = now_ms
        burst = self._burst(sensor)
        sensor.bucket.record(value, sensor.bound, burst, now_ms)
        tokens = sensor.bucket.measure(sensor.bound, burst, now_ms)
        return self._throttle_time_ms(tokens, sensor) if tokens < 0 else 0


class QuotaManagers:
    """The broker's four client quota managers, kept in line with the metadata image."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        samples = int(str(values.get("quota.window.num", 11)))
        window_s = int(str(values.get("quota.window.size.seconds", 1)))
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples, window_s)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples, window_s)
        # Kafka bounds a request-time throttle by one window.
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, samples, window_s,
                                          max_throttle_time_ms=window_s * 1000)
        self.controller_mutation = ControllerMutationQuotaManager(
            CONTROLLER_MUTATION_RATE, int(str(values.get("controller.quota.window.num", 11))),
            int(str(values.get("controller.quota.window.size.seconds", 1))))
        self._applied: Mapping[QuotaEntity, Mapping[str, float]] | None = None

    def managers(self) -> tuple[ClientQuotaManager, ...]:
        return (self.produce, self.fetch, self.request, self.controller_mutation)

    def update(self, client_quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Apply the image's quotas (a no-op when they did not change)."""
        if client_quotas is self._applied:
            return
        self._applied = client_quotas
        per_key: dict[str, dict[QuotaKey, float]] = {m.quota_key: {} for m in self.managers()}
        for entity, values in client_quotas.items():
            key = quota_key(entity)
            for name, value in values.items():
                if name in per_key:
                    per_key[name][key] = value
        for manager in self.managers():
            manager.update_quotas(per_key[manager.quota_key])


def quota_key(entity: QuotaEntity) -> QuotaKey:
    """(user part, client-id part) of an image entity."""
    names = dict(entity)
    user: EntityPart = None
    client: EntityPart = None
    if USER in names:
        user = names[USER] if names[USER] is not None else DEFAULT
    if CLIENT_ID in names:
        client = names[CLIENT_ID] if names[CLIENT_ID] is not None else DEFAULT
    return user, client


class HandlerTimer:
    """Awaits a request handler and adds up the time its steps run on the event loop, not
    the time it waits: the request-time quota's "thread time" (Kafka's requestThreadTimeNanos)."""

    __slots__ = ("_steps", "elapsed_ns")

    def __init__(self, handler: Awaitable[Any]) -> None:
        self._steps = handler.__await__()
        self.elapsed_ns = 0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._steps
        value: Any = None
        error: BaseException | None = None
        while True:
            start = time.perf_counter_ns()
            try:
                step = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as done:
                self.elapsed_ns += time.perf_counter_ns() - start
                return done.value
            except BaseException:
                self.elapsed_ns += time.perf_counter_ns() - start
                raise
            self.elapsed_ns += time.perf_counter_ns() - start
            value, error = None, None
            try:
                value = yield step
            except BaseException as exc:  # cancellation goes on to the handler
                error = exc


# Kafka exempts inter-broker (CLUSTER_ACTION) requests from the request-time quota.
REQUEST_QUOTA_EXEMPT: frozenset[int] = frozenset({
    ApiKey.WRITE_TXN_MARKERS, ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH,
    ApiKey.ALTER_PARTITION, ApiKey.FETCH_SNAPSHOT, ApiKey.BROKER_REGISTRATION,
    ApiKey.BROKER_HEARTBEAT, ApiKey.UNREGISTER_BROKER, ApiKey.ALLOCATE_PRODUCER_IDS,
    ApiKey.ASSIGN_REPLICAS_TO_DIRS,
    ApiKey.DISKLESS_CREATE_PARTITIONS, ApiKey.DISKLESS_DELETE_TOPICS, ApiKey.DISKLESS_COMMIT_FILE,
    ApiKey.DISKLESS_DELETE_RECORDS, ApiKey.DISKLESS_LIST_OFFSETS, ApiKey.DISKLESS_FIND_BATCHES,
    ApiKey.DISKLESS_DESCRIBE_FILES,
})


def now_ms() -> int:
    return int(time.time() * 1000)


def throttle_response(ctx: RequestContext, response: Any, timer: HandlerTimer | None) -> None:
    """Finish a request's throttling: record its handler time against the request quota
    (unless it gets no response, as Kafka exempts acks=0 produce), take the larger throttle,
    set it in the response and mute the connection for it. Kafka answers at once and mutes
    for every request version; KIP-219's version boundaries only tell clients whether to
    wait on their side as well."""
    throttle = ctx.throttle_time_ms
    if timer is not None and response is not None:
        quotas = ctx.broker.quotas
        throttle = max(throttle, quotas.request.record_and_get_throttle_time_ms(
            ctx.principal.name, ctx.client_id or "",
            timer.elapsed_ns * NANOS_TO_PERCENTAGE, now_ms()))
    if throttle <= 0:
        return
    ctx.throttle_time_ms = throttle
    if response is not None and hasattr(response, "throttle_time_ms"):
        response.throttle_time_ms = throttle
    if not ctx.forwarded:  # a forwarding broker mutes its client, not the nodes' link
        ctx.connection.throttle(throttle)


def client_of(ctx: RequestContext) -> tuple[str, str]:
    """(user principal, client id) of a request, as quotas see them."""
    return ctx.principal.name, ctx.client_id or ""


THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."


class MutationQuota:
    """One request's controller mutation quota (Kafka's Strict/PermissiveControllerMutation
    Quota): the controller calls `record` with each topic's partition count."""

    __slots__ = ("_manager", "_user", "_client_id", "_strict", "_throttle_ms", "_at_ms")

    def __init__(self, manager: ControllerMutationQuotaManager, user: str, client_id: str,
                 strict: bool) -> None:
        self._manager = manager
        self._user = user
        self._client_id = client_id
        self._strict = strict
        self._throttle_ms = 0
        self._at_ms = 0

    def record(self, permits: int) -> None:
        """Count `permits` partition mutations; strict: raise THROTTLING_QUOTA_EXCEEDED instead
        once the quota is exhausted."""
        now = now_ms()
        if self._strict:
            throttle = self._manager.record_strict(self._user, self._client_id, permits, now)
            if throttle > 0:
                self._throttle_ms, self._at_ms = throttle, now
                raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                 THROTTLING_QUOTA_EXCEEDED_MESSAGE)
            return
        throttle = self._manager.record_and_get_throttle_time_ms(
            self._user, self._client_id, permits, now)
        if throttle > 0:
            self._throttle_ms, self._at_ms = throttle, now

    def throttle_time_ms(self) -> int:
        """The last throttle time, less the time since it was computed."""
        return max(0, self._throttle_ms - (now_ms() - self._at_ms))


def mutation_quota_for(ctx: RequestContext, strict_since_version: int) -> MutationQuota | None:
    """The request's mutation quota (strict from `strict_since_version`), None when no
    controller_mutation_rate quota is configured."""
    manager = ctx.broker.quotas.controller_mutation
    if not manager.enabled:
        return None
    user, client_id = client_of(ctx)
    return MutationQuota(manager, user, client_id, ctx.api_version >= strict_since_version)


def finish_mutation_quota(ctx: RequestContext, quota: MutationQuota | None) -> None:
    """Hand the mutation throttle to the dispatcher (response field and mute)."""
    if quota is not None:
        ctx.throttle_time_ms = max(ctx.throttle_time_ms, quota.throttle_time_ms())
