# Sourced by the *_h100.sh scripts: $OUT, a filtered log of everything printed ($LOG), the JSON
# the benches merge into ($J), the part to run ($what: all, bench or sanitize), and
#   sanitize TOOL VARIANT LAYOUT M N K     compute-sanitizer on one launch (bf16, or $SAN_DTYPE), one line out
# Usage: NAME=hopper; source benchmarks/h100_run.sh "$@"
set -u
OUT=${OUT:-/tmp/${NAME}_out}; mkdir -p "$OUT"
LOG="$OUT/${NAME}_h100.log"; J="$OUT/${NAME}_h100.json"
exec > >(tr -cd '\11\12\15\40-\176' | grep --line-buffered -v -i "performancewarning\|warn(errors" | tee -a "$LOG") 2>&1
what=${1:-all}
sanitize() {
  local f=/tmp/san_$1_$2_$4x$5x$6.txt
  compute-sanitizer --tool $1 --report-api-errors no --error-exitcode 9 \
    python benchmarks/profile_one.py $2 0 ${SAN_DTYPE:-bfloat16} $3 $4 $5 $6 > $f 2>&1
  echo "compute-sanitizer --tool $1 $2 $3 $4x$5x$6: exit $? | $(grep -v '^$' $f | tail -1)"
}
export -f sanitize
