#!/bin/sh
# Describe, upgrade, downgrade or disable feature levels, with kafka-features.sh's flags.
# Apache Kafka's script name for `kafka-ext features`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" features "$@"
