#!/bin/sh
# Elect preferred or unclean partition leaders, with kafka-leader-election.sh's flags.
# Apache Kafka's script name for `kafka-ext leader-election`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" leader-election "$@"
