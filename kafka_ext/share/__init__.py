"""Share groups (KIP-932) on the broker: share-partitions, share sessions, the persister."""
