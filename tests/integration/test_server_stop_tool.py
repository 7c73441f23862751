"""bin/kafka-server-stop.sh (`kafka-ext server-stop`) against a real broker process: a node
picked by --node-id stops cleanly (exit 0, the clean-shutdown marker in its log dir), and a
filter that names no running node signals nothing. Always filtered by a node id of this test's
own: other kafka-ext servers of this user may be running beside it."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

from tests.integration.conftest import BrokerProcess

LAUNCHER = Path(__file__).resolve().parents[2] / "bin" / "kafka-server-stop.sh"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"


def server_stop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LAUNCHER), *args], capture_output=True, text=True, timeout=60)


def test_the_node_named_by_node_id_stops_cleanly(tmp_path: Path) -> None:
    node_id = random.randrange(5000, 9000)
    broker = BrokerProcess(tmp_path / "data", {"node.id": str(node_id)})
    broker.start()
    assert broker.proc is not None
    try:
        missed = server_stop(f"--node-id={node_id + 1}")
        assert (missed.returncode, missed.stdout, missed.stderr) == (0, "", "")
        assert broker.proc.poll() is None
        assert not (broker.data_dir / CLEAN_SHUTDOWN_MARKER).exists()

        done = server_stop(f"--node-id={node_id}", "--process-role=controller")
        assert done.returncode == 0, done.stderr
        assert done.stdout == ("When both node-id and process-role are provided, the value "
                               "for node-id will take precedence\n")
        assert broker.proc.wait(timeout=60) == 0, broker.log()
    finally:
        broker.stop()
    assert (broker.data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    assert f"kafka-ext broker {node_id} stopped" in broker.log()
    assert "Traceback" not in broker.log()
