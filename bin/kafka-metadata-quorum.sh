#!/bin/sh
# Describe the KRaft metadata quorum (--status, --replication), with kafka-metadata-quorum.sh's flags.
# Apache Kafka's script name for `kafka-ext metadata-quorum`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" metadata-quorum "$@"
