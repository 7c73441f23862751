"""The share coordinator (KIP-932): share-partition state over `__share_group_state`."""
