"""LogDirFailureChannel: a failed log dir goes offline and the broker keeps serving (KIP-112).

Mirrors Kafka's LogDirFailureChannel + ReplicaManager.handleLogDirFailure. Any I/O error on a
dir (an append, a checkpoint, a replica move, or the periodic probe that lists the dir and
reads its meta.properties) reports the dir here, from any thread. On the event loop the dir is
then marked offline: its logs are dropped from the LogManager, its partitions answer
KAFKA_STORAGE_ERROR, moves touching it stop, and the controller records the broker's remaining
online dirs (BrokerRegistrationChangeRecord LogDirs, KIP-858) so the image shows the failure.
Partitions on the other dirs never notice. Only when every dir is offline does the broker stop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import uuid
from pathlib import Path
from typing import Any

from kafka_ext.controller.image import MetadataImage
from kafka_ext.controller.metadata_log import METADATA_TOPIC
from kafka_ext.protocol.errors import KafkaError
from kafka_ext.storage.checkpoints import MetaProperties

logger = logging.getLogger(__name__)


class LogDirFailureChannel:
    """Owned by the broker; `report` is thread-safe, everything else runs on the event loop."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Bind to the running loop and hook the LogManager's checkpoint writes."""
        self._loop = asyncio.get_running_loop()
        self.broker.log_manager.failure_listener = self.report

    # -- reporting ---------------------------------------------------------------------------

    def report(self, log_dir: Path, exc: BaseException) -> None:
        """An I/O error hit `log_dir` (callable from any thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            logger.error("I/O error in log dir %s before start or after stop: %s", log_dir, exc)
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.handle(log_dir, str(exc))
        else:
            loop.call_soon_threadsafe(self.handle, log_dir, str(exc))

    def dir_of(self, path: Path) -> Path | None:
        """The configured log dir holding `path`, if any."""
        for log_dir in self.broker.log_manager.log_dirs:
            if path == log_dir or log_dir in path.parents:
                return log_dir
        return None

    def handle(self, log_dir: Path, reason: str) -> None:
        """Take `log_dir` offline: its partitions answer KAFKA_STORAGE_ERROR from now on."""
        lm = self.broker.log_manager
        if log_dir in lm.offline_dirs or log_dir not in lm.log_dirs:
            return
        lost = lm.mark_dir_offline(log_dir, reason)
        replicas = self.broker.replica_manager
        message = f"log dir {log_dir} is offline: {reason}"
        for tp in lost:
            replicas.partitions.pop(tp, None)
            replicas.storage_errors[tp] = message
            replicas._notify_data(tp)  # wake long-polling fetchers: they now see the error
        mover = getattr(self.broker, "replica_mover", None)
        if mover is not None:
            mover.on_dir_offline(log_dir)
        logger.error("log dir %s failed and is now offline (KIP-112): %s; %d partition(s) "
                     "offline: %s; online dirs: %s", log_dir, reason, len(lost),
                     ", ".join(f"{t}-{p}" for t, p in sorted(lost)) or "none",
                     [str(d) for d in lm.online_dirs()])
        if any(tp[0] == METADATA_TOPIC for tp in lost) or not lm.online_dirs():
            logger.critical("the metadata log or every log dir is offline: stopping the broker")
            os.kill(os.getpid(), signal.SIGTERM)  # the usual graceful shutdown
            return
        self.broker.lifecycle.heartbeat_now()  # its OfflineLogDirs tell the controller

    def online_directory_ids(self) -> list[uuid.UUID]:
        lm = self.broker.log_manager
        return [lm.directory_id(d) for d in lm.online_dirs()]

    def offline_directory_ids(self) -> list[uuid.UUID]:
        """The dirs that went offline after they were loaded (BrokerHeartbeat OfflineLogDirs);
        a dir that failed before its meta.properties was read was never registered."""
        lm = self.broker.log_manager
        return [lm.directory_id(d) for d in lm.offline_dirs if lm.has_directory_id(d)]

    # -- probing -----------------------------------------------------------------------------

    async def probe(self) -> None:
        """List each online dir and read its meta.properties (off the loop); a failure = offline.

        Catches a dir that vanished, became unreadable (chmod 000) or was replaced, even when no
        write has touched it since: open segment files keep working after such a change.
        """
        lm = self.broker.log_manager
        for log_dir in lm.online_dirs():
            expected = lm.directory_id(log_dir)
            try:
                await self.broker.run_blocking(functools.partial(_probe_dir, log_dir, expected))
            except (OSError, KafkaError) as exc:
                self.handle(log_dir, f"probe failed: {exc}")

    # -- metadata ----------------------------------------------------------------------------

    def mark_unlocatable_partitions(self, image: MetadataImage) -> None:
        """At start with an offline dir: hosted partitions with no log on a good dir were on it
        (Kafka's "not new and a dir is offline" rule): keep them offline, never recreate them."""
        lm = self.broker.log_manager
        if not lm.offline_dirs:
            return
        node = self.broker.node_id
        for topic in image.topics_by_name.values():
            for part in topic.partitions.values():
                if (node in part.replicas and not part.is_diskless  # diskless: never a log
                        and lm.get_log(topic.name, part.partition_id) is None):
                    lm.offline_partitions.add((topic.name, part.partition_id))

    def on_image(self, old: MetadataImage | None, new: MetadataImage) -> None:
        """Forget offline partitions of deleted topics (a new topic of that name starts fresh)."""
        lm = self.broker.log_manager
        for tp in [tp for tp in lm.offline_partitions if tp[0] not in new.topics_by_name]:
            lm.offline_partitions.discard(tp)
            self.broker.replica_manager.storage_errors.pop(tp, None)


def _probe_dir(log_dir: Path, expected: uuid.UUID) -> None:
    with os.scandir(log_dir) as entries:
        next(entries, None)
    meta = MetaProperties.read(log_dir)
    if meta is None or meta.directory_id != expected:
        raise OSError(f"meta.properties of {log_dir} is gone or changed")
