# Sourced by the results scripts: what a results directory says about its measurement.
#
#   record_run OUT_DIR CAPRL COMMAND [KEY=VALUE ...]
#
# writes OUT_DIR/machine.json (`CAPRL machine --json`: CPU, cores, SIMD level, GPU build) and
# OUT_DIR/run.json (the command, the commit and whether it had uncommitted changes, the date, and
# each KEY=VALUE as a string). scripts/results/render.py prints no page without them.
record_run() {
  local out=$1 caprl=$2 command=$3
  shift 3
  "$caprl" machine --json > "$out/machine.json.tmp"
  local commit dirty extra="" kv
  commit=$(git rev-parse --short=12 HEAD)
  dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo true || echo false)
  for kv in "$@"; do
    extra+=$(printf ',\n  "%s": "%s"' "${kv%%=*}" "${kv#*=}")
  done
  printf '{\n  "command": "%s",\n  "commit": "%s",\n  "uncommitted_changes": %s,\n  "date": "%s"%s\n}\n' \
    "$command" "$commit" "$dirty" "$(date -u +%F)" "$extra" > "$out/run.json.tmp"
  mv "$out/machine.json.tmp" "$out/machine.json"
  mv "$out/run.json.tmp" "$out/run.json"
}
