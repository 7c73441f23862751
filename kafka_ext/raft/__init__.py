"""KRaft: the Raft protocol that replicates `__cluster_metadata` (KIP-595, KIP-630, KIP-996).

`core.py` is the sans-IO state machine; the broker drives it with asyncio and the simulation
test (tests/unit/raft) drives it with a seeded scheduler.
"""
