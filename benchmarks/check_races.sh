#!/usr/bin/env bash
# compute-sanitizer racecheck and synccheck over the race-stress set (tests/test_gpu_races.py:
# every warp-specialised, persistent and clustered Hopper configuration and the mma.sync cp.async
# rings, once each on a ring-wrapping shape), on a GPU machine. Logs: $OUT (or
# benchmarks/results) /racecheck_<gpu>.log and synccheck_<gpu>.log; exit status 1 when a tool
# reports a hazard or the run fails.
#   bash benchmarks/check_races.sh            # run from the repository root
set -u
cd "$(dirname "$0")/.."
DEST=${OUT:-benchmarks/results}
mkdir -p "$DEST"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | awk '{print tolower($2)}')
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -z "$SAN" ]; then
    SAN=$(python -c "import glob, site; print((glob.glob(site.getsitepackages()[0] + '/nvidia/**/compute-sanitizer', recursive=True) or [''])[0])")
fi
[ -n "$SAN" ] || { echo "compute-sanitizer not found" >&2; exit 2; }
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
status=0
for tool in racecheck synccheck; do
    log="$DEST/${tool}_${GPU:-gpu}.log"
    {
        echo "# $tool at $(git rev-parse --short HEAD 2>/dev/null || echo unknown) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
        echo "# $SAN --tool $tool --racecheck-report hazard python tests/test_gpu_races.py --once"
    } > "$log"
    extra=""
    [ "$tool" = racecheck ] && extra="--racecheck-report hazard"
    "$SAN" --tool "$tool" $extra --error-exitcode 3 python tests/test_gpu_races.py --once >> "$log" 2>&1
    rc=$?
    echo "# exit status $rc" >> "$log"
    tail -3 "$log"
    grep -q "ERROR SUMMARY: 0 errors\|RACECHECK SUMMARY: 0 hazards" "$log" || status=1
    [ $rc -eq 0 ] || status=1
done
exit $status
