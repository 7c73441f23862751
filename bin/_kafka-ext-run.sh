#!/bin/sh
# The one body of every bin/ launcher: run `kafka-ext COMMAND ARGS...` with the best Python.
#
#   1. the checkout's .venv (the README's quick start), activated or not;
#   2. else a `kafka-ext` console script on PATH (pip install);
#   3. else ${PYTHON:-python3} with this checkout on PYTHONPATH.
#
# A launcher is two lines (see bin/kafka-topics.sh):
#   here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
#   exec "$here/_kafka-ext-run.sh" COMMAND "$@"
# Symlinked launchers work: paths are resolved from the launcher's real location.
self=$(readlink -f -- "$0" 2>/dev/null || echo "$0")
checkout=$(CDPATH= cd -- "$(dirname -- "$self")/.." && pwd)
if [ "$#" -eq 0 ]; then
    echo "usage: $0 COMMAND [ARGS...]  (a kafka-ext subcommand)" >&2
    exit 2
fi
if [ -x "$checkout/.venv/bin/python" ]; then
    exec env PYTHONPATH="$checkout${PYTHONPATH:+:$PYTHONPATH}" \
        "$checkout/.venv/bin/python" -m kafka_ext.cli.main "$@"
fi
if command -v kafka-ext >/dev/null 2>&1; then
    exec kafka-ext "$@"
fi
exec env PYTHONPATH="$checkout${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m kafka_ext.cli.main "$@"
