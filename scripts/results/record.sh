# Sourced by the results scripts: what a results directory says about its measurement.
#
#   record_run OUT_DIR CAPRL COMMAND [KEY=VALUE ...]
#
# writes OUT_DIR/machine.json (`CAPRL machine --json`: CPU, cores, SIMD level, GPU build) and
# OUT_DIR/run.json (the command, the commit and whether it had uncommitted changes outside
# OUT_DIR, the date, and each KEY=VALUE as a string). scripts/results/render.py prints no page
# without them.
record_run() {
  local out=$1 caprl=$2 command=$3
  shift 3
  "$caprl" machine --json > "$out/machine.json.tmp"
  local dirty
  # The measurement's own files (OUT_DIR, written before this) are not uncommitted code.
  dirty=$(git status --porcelain --untracked-files=no -- . ":(exclude)$out" | grep -q . \
    && echo true || echo false)
  python3 - "$command" "$(git rev-parse --short=12 HEAD)" "$dirty" "$@" > "$out/run.json.tmp" <<'PY'
import datetime, json, sys
command, commit, dirty, *extra = sys.argv[1:]
run = {"command": command, "commit": commit, "uncommitted_changes": dirty == "true",
       "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat()}
run.update(kv.split("=", 1) for kv in extra)
json.dump(run, sys.stdout, indent=2)
print()
PY
  mv "$out/machine.json.tmp" "$out/machine.json"
  mv "$out/run.json.tmp" "$out/run.json"
}
