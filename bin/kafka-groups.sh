#!/bin/sh
# List the groups of every type, with kafka-groups.sh's flags.
# Apache Kafka's script name for `kafka-ext groups`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" groups "$@"
