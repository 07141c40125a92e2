#!/usr/bin/env bash
# Times `baton eval` trials side by side under the trial emulator (--env bwrap) and a container
# runtime (--env podman): the same N tasks (a Dockerfile with two RUN lines and a WORKDIR, an
# oracle that writes a file, a verifier that checks it), oracle agent, one at a time. Prints
# the job wall time per environment, per trial, and the image build cold and cached.
# No registry is reachable here, so `debian:bookworm-slim` is the test base image made from
# this host's programs (tests/support/base-image.sh), tagged with that name in podman's store;
# the emulator runs the same FROM on the host's own system.
# Usage: tools/eval-env-bench.sh [BATON_BINARY] [N]   (as root, with podman and bubblewrap)
set -euo pipefail
baton=${1:-target/release/baton}
n=${2:-10}
here=$(cd "$(dirname "$0")/.." && pwd)
baton=$(realpath "$baton")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash "$here/tests/support/base-image.sh" podman docker.io/library/debian:bookworm-slim "$baton"
nonce=$(date +%s%N)
for i in $(seq 1 "$n"); do
    t="$work/tasks/bench-$i"
    mkdir -p "$t/environment" "$t/solution" "$t/tests"
    printf '[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n[environment]\nallow_internet = false\n' >"$t/task.toml"
    echo "Write 42 into /app/answer.txt." >"$t/instruction.md"
    printf 'FROM debian:bookworm-slim\nLABEL bench=%s-%s\nRUN mkdir -p /data && echo seeded > /data/seed.txt\nRUN echo ready > /data/ready\nWORKDIR /app\n' "$nonce" "$i" >"$t/environment/Dockerfile"
    echo 'echo 42 > /app/answer.txt' >"$t/solution/solve.sh"
    echo 'if [ "$(cat /app/answer.txt)" = 42 ] && [ -f /data/ready ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt' >"$t/tests/test.sh"
done
run() {
    local env=$1 start end
    start=$(date +%s.%N)
    "$baton" eval "$work/tasks" --agent oracle --env "$env" --out "$work/jobs" --no-progress >"$work/$env.out" 2>&1
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}
bwrap=$(run bwrap)
cold=$(run podman)
cached=$(run podman)
grep '^score' "$work/bwrap.out" | sed 's/^/bwrap:  /'
grep '^score' "$work/podman.out" | sed 's/^/podman: /'
printf 'bwrap:          %6.2f s for %d trials, %5.2f s per trial\n' "$bwrap" "$n" "$(echo "$bwrap / $n" | bc -l)"
printf 'podman (cold):  %6.2f s for %d trials, %5.2f s per trial (each builds its image)\n' "$cold" "$n" "$(echo "$cold / $n" | bc -l)"
printf 'podman (cached):%6.2f s for %d trials, %5.2f s per trial (images built already)\n' "$cached" "$n" "$(echo "$cached / $n" | bc -l)"
