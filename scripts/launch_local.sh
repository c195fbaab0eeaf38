#!/usr/bin/env bash
# Start N local processes of one purejaxppo run, for trying several processes on one machine:
#   scripts/launch_local.sh 2 train --env CartPole-v1 --split envs --num-envs 8 --run-dir runs/two
# Each process gets --coordinator 127.0.0.1:PORT (a free port, or $PUREJAXPPO_PORT)
# --num-processes N --process-id I and one CPU device (unless XLA_FLAGS forces more); process 0
# writes the run folder and prints the progress, the others print only errors. Exits with the
# first non-zero status of any process (0 when all succeed). Ctrl-C stops them all.
set -uo pipefail
if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N COMMAND [FLAGS...]   e.g. $0 2 train --env CartPole-v1 --split envs --run-dir runs/two" >&2
  exit 2
fi
n=$1; shift
python=${PYTHON:-python}
port=${PUREJAXPPO_PORT:-$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null' INT TERM
for ((i = 0; i < n; i++)); do
  "$python" -m purejaxppo "$@" --coordinator "127.0.0.1:$port" --num-processes "$n" --process-id "$i" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid"; code=$?
  if [ "$status" -eq 0 ] && [ "$code" -ne 0 ]; then status=$code; fi
done
exit "$status"
