#!/usr/bin/env bash
# Runs every fuzz target (or the ones named) for SECONDS each (default 1200) on its
# committed corpus in fuzz/corpus/TARGET, one after another, and prints the executions and
# the outcome per target. Needs nightly and cargo-fuzz (`cargo install cargo-fuzz`).
# Crash reproducers land in fuzz/artifacts/TARGET/; the exit status is 1 if any target
# crashed. Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-1200}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gbnf regex schema matcher repair request)
cargo +nightly fuzz build -O
bin=fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release
failed=0
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  log="fuzz/artifacts/$t/run.log"
  if "$bin/$t" "fuzz/corpus/$t" -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 \
      -timeout=10 -artifact_prefix="fuzz/artifacts/$t/" >"$log" 2>&1; then
    outcome="0 crashes"
  else
    outcome="CRASH: see $log and fuzz/artifacts/$t/"
    failed=1
  fi
  runs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1 || true)
  echo "$t: ${runs:-no summary} | $outcome"
done
exit $failed
