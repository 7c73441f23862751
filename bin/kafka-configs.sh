#!/bin/sh
# Add, delete or describe client quotas (users, clients) and topic or broker configs, with kafka-configs.sh's flags.
# Apache Kafka's script name for `kafka-ext configs`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" configs "$@"
