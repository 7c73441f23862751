#!/bin/sh
# Print topic partition offsets (latest, earliest, max timestamp or by time), with kafka-get-offsets.sh's flags.
# Apache Kafka's script name for `kafka-ext get-offsets`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" get-offsets "$@"
