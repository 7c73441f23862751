#!/bin/sh
# Find and abort hanging transactions, with kafka-transactions.sh's subcommands and flags.
# Apache Kafka's script name for `kafka-ext transactions`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" transactions "$@"
