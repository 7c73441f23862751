#!/bin/sh
# Stop this user's kafka-ext servers: kafka-server-stop.sh [--node-id=ID] [--process-role=ROLES]
# (SIGTERM, or $SIGNAL). Apache Kafka's script name for `kafka-ext server-stop`.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" server-stop "$@"
