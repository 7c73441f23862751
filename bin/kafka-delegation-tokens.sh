#!/bin/sh
# Create, renew, expire or describe delegation tokens, with kafka-delegation-tokens.sh's flags.
# Apache Kafka's script name for `kafka-ext delegation-tokens`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" delegation-tokens "$@"
