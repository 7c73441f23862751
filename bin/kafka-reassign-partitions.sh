#!/bin/sh
# Move replicas between brokers and log dirs, with kafka-reassign-partitions.sh's flags.
# Apache Kafka's script name for `kafka-ext reassign-partitions`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" reassign-partitions "$@"
