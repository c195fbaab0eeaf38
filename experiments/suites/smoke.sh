# Smoke: each suite trains 4,096 steps from the CLI (pip install -e ".[dev,suites]"); run from the repo root.
mkdir -p runs/suites
for e in navix:Navix-Empty-5x5-v0 xminigrid:MiniGrid-Empty-6x6 pgx:2048 jumanji:Snake-v1 craftax:Craftax-Classic-Symbolic-v1 brax:inverted_pendulum playground:CartpoleBalance; do
  d=runs/suites/$(echo $e | tr ':' '-')
  rm -rf $d
  /usr/bin/time -f "%e s" timeout 900 python -m purejaxppo train --env $e --total-timesteps 4096 --num-envs 8 --num-steps 64 --quiet --no-compile-cache --run-dir $d > $d.log 2>&1
  echo "$e rc=$?" >> experiments/suites/smoke.out; tail -4 $d.log >> experiments/suites/smoke.out
done
echo ALLDONE >> experiments/suites/smoke.out
