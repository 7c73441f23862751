#!/bin/sh
# Add, remove or list ACLs, with kafka-acls.sh's flags.
# Apache Kafka's script name for `kafka-ext acls`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" acls "$@"
