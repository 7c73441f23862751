#!/bin/sh
# Create partition chunks and move their replicas, with the chunks proposal's kafka-chunks.sh flags.
# The proposal's script name for `kafka-ext chunks`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" chunks "$@"
