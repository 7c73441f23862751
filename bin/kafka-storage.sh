#!/bin/sh
# Format log dirs with a cluster id, print a new id, or show what the dirs hold, with kafka-storage.sh's flags.
# Apache Kafka's script name for `kafka-ext storage`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" storage "$@"
