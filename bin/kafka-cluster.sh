#!/bin/sh
# The cluster id, and unregistering brokers, with kafka-cluster.sh's flags.
# Apache Kafka's script name for `kafka-ext cluster`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" cluster "$@"
