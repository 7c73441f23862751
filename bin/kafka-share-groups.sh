#!/bin/sh
# List, describe and delete share groups (KIP-932) and reset or delete their offsets, with
# kafka-share-groups.sh's flags. Apache Kafka's script name for `kafka-ext share-groups`;
# bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" share-groups "$@"
