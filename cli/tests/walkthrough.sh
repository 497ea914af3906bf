#!/usr/bin/env bash
# A scheduler written in shell drives one run of the protocol with the manifestdb tool.
# The store lives in $MANIFESTDB_DIR (store.redb + staging/); a fresh one is made if unset.
set -euo pipefail
export MANIFESTDB_DIR="${MANIFESTDB_DIR:-$(mktemp -d)/store}"
D=daily_units R=2026-11-29 EU=date=2026-11-29/region=eu US=date=2026-11-29/region=us

manifestdb init

# 1. Declare the run: its pinned input snapshot and, per task (= partition), the rows and
#    total (here: units) that the input says the output must hold; and its grain: one row per
#    (store, item), measure units, CSV files. Validation then reads the rows itself.
manifestdb run declare --dataset $D --run $R --snapshot sales@v42 --task $EU:2:700 --task $US:3:450 \
    --grain store,item --measure units --format csv

# Publishing now is refused (exit 3): no task has a valid attempt. Nothing is written.
status=0; manifestdb publish --dataset $D --run $R || status=$?
test $status -eq 3

# 2. A worker begins attempt 1 of the eu task and writes its file into its private staging
#    directory, then dies before the scheduler hears back: the acknowledgement is lost.
#    (`|| exit $?` stops the script with begin's exit code, so a failed begin cannot leave a
#    previous attempt's variables in use; on failure `--env` prints a line that fails `eval` too.)
env=$(manifestdb attempt begin --env --dataset $D --run $R --partition $EU) || exit $?; eval "$env"
lost_attempt=$MANIFESTDB_ATTEMPT lost_dir=$MANIFESTDB_STAGING_DIR
printf 'store,item,units\n1,7,300\n2,7,400\n' > "$lost_dir/part.csv"

# The scheduler retries on another worker: attempt 2 gets a directory of its own.
env=$(manifestdb attempt begin --env --dataset $D --run $R --partition $EU) || exit $?; eval "$env"
printf 'store,item,units\n2,7,400\n1,7,300\n' > "$MANIFESTDB_STAGING_DIR/part.csv"
manifestdb attempt finish --dataset $D --run $R --partition $EU --attempt $MANIFESTDB_ATTEMPT \
    --snapshot sales@v42 --scan

# The lost attempt was not dead after all: it finishes too. Two candidates now exist. (Its
# worker also reports rows and total: with a grain they are only cross-checks.)
manifestdb attempt finish --dataset $D --run $R --partition $EU --attempt $lost_attempt \
    --snapshot sales@v42 --rows 2 --total 700 --file part.csv

# 3. The us task: attempt 1 writes store 3 twice (3 rows, 450 units, as expected) and its
#    worker reports the right-looking numbers; reading at the grain finds the duplicate key,
#    validation marks it invalid (exit 3) and the scheduler retries.
env=$(manifestdb attempt begin --env --dataset $D --run $R --partition $US) || exit $?; eval "$env"
printf 'store,item,units\n3,7,100\n4,7,200\n3,7,150\n' > "$MANIFESTDB_STAGING_DIR/part.csv"
manifestdb attempt finish --dataset $D --run $R --partition $US --attempt $MANIFESTDB_ATTEMPT \
    --snapshot sales@v42 --rows 3 --total 450 --scan
status=0; manifestdb attempt validate --dataset $D --run $R --partition $US --attempt $MANIFESTDB_ATTEMPT || status=$?
test $status -eq 3

env=$(manifestdb attempt begin --env --dataset $D --run $R --partition $US) || exit $?; eval "$env"
printf 'store,item,units\n3,7,100\n4,7,200\n5,7,150\n' > "$MANIFESTDB_STAGING_DIR/part.csv"
manifestdb attempt finish --dataset $D --run $R --partition $US --attempt $MANIFESTDB_ATTEMPT \
    --snapshot sales@v42 --scan
manifestdb attempt validate --dataset $D --run $R --partition $US --attempt $MANIFESTDB_ATTEMPT --checksums

# 4. The coordinator validates both eu candidates, in any order: the lowest-numbered valid
#    attempt is accepted, whichever finished or was validated first.
manifestdb attempt validate --dataset $D --run $R --partition $EU --attempt 2 --checksums
manifestdb attempt validate --dataset $D --run $R --partition $EU --attempt 1 --checksums

# 5. Publish: one transaction writes generation 1 and moves the dataset's pointer.
manifestdb publish --dataset $D --run $R
manifestdb publish --dataset $D --run $R   # a retried publish: same generation, nothing new

# 6. What readers now see: one attempt per partition, totals equal to the input's.
manifestdb run show --dataset $D --run $R
manifestdb show --dataset $D
manifestdb log --dataset $D
