"""The recorded stock-client requests the fuzzer mutates (tests/data/wire_corpus/).

`tools/record_wire_corpus.py` records them; `corpus.json` beside the frames lists them and the
topics they name, which a broker under attack needs so that mutations reach partitions that
exist.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parents[1] / "data" / "wire_corpus"


@dataclass(frozen=True, slots=True)
class Seed:
    """One recorded request frame, size prefix included."""

    name: str  # file name: client-key-Api-vN[-flavour].bin
    client: str
    api_key: int
    api_version: int
    frame: bytes


def load_corpus(directory: Path = CORPUS_DIR) -> list[Seed]:
    """Every recorded frame, in file-name order (iteration numbers depend on the order)."""
    manifest = json.loads((directory / "corpus.json").read_text())
    return [Seed(e["file"], e["client"], e["api_key"], e["api_version"],
                 (directory / e["file"]).read_bytes())
            for e in sorted(manifest["frames"], key=lambda e: e["file"])]


def corpus_topics(directory: Path = CORPUS_DIR) -> dict[str, dict]:
    """{topic: {"partitions": n, "config": {...}}} for the topics the requests name."""
    return json.loads((directory / "corpus.json").read_text())["topics"]
