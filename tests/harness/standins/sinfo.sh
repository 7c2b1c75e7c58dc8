#!/bin/bash
# Stand-in sinfo for tests/test_jobs.py, tests/test_plan_sharded.py and tests/test_gpu_job.py, answering from a table
# of nodes, one line per node and partition as `sinfo -h -N -o '%P|%N|%c|%G|%m|%l'` prints them (the default
# partition marked *): $STANDIN_DIR/sinfo.table where it exists, else partitions gpu (default; 2 nodes, 64 CPUs, 4
# GPUs each of the type $SINFO_GPU_TYPE, default a100, 125 GiB, 2 days) and cpu (3 nodes of 8 CPUs, 15.6 GiB, 1 h).
# Asked for %m or %G alone (the memory plan) it prints that column for each node of the partition asked (-p), or of
# all.
set -euo pipefail
gpu=${SINFO_GPU_TYPE:-a100}
fmt='' part=''
while (($#)); do
    case $1 in -o) fmt=$2; shift ;; -p) part=$2; shift ;; --format=*) fmt=${1#*=} ;; --partition=*) part=${1#*=} ;;
    esac
    shift
done
table() {
    if [[ -e ${STANDIN_DIR:-}/sinfo.table ]]; then
        cat "$STANDIN_DIR/sinfo.table"
    else
        printf 'gpu*|g1|64|gpu:%s:4(S:0-1)|128000|2-00:00:00\ngpu*|g2|64|gpu:%s:4(S:0-1),tmpdisk:100|128000|2-00:00:00\n' \
            "$gpu" "$gpu"
        printf 'cpu|c%s|8|(null)|16000|1:00:00\n' 1 2 3
    fi
}
# column N of the table's nodes in the partition asked (-p), or of all
column() {
    table | while IFS='|' read -r -a row; do
        [[ -n $part && ${row[0]%\*} != "$part" ]] || echo "${row[$1]}"
    done
}
case $fmt in
%m) column 4 ;;
%G) column 3 ;;
'%P|%N|%c|%G|%m|%l') table ;;
esac
