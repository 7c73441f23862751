"""Broker side of diskless topics (KIP-1163/1164): object store, WAL writer, batch reader, orphan scan."""
