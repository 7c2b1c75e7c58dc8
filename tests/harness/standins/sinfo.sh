#!/bin/bash
# Stand-in sinfo for tests/test_jobs.py: partitions gpu (default; 2 nodes, 64 CPUs, 4 GPUs each of the type
# $SINFO_GPU_TYPE, default a100, 125 GiB, 2 days) and cpu (3 nodes of 8 CPUs, 15.6 GiB, 1 h); answers the formats
# jobs/lib/cluster.sh (one line per node and partition) and the memory plan (%m, %G) ask for.
set -euo pipefail
gpu=${SINFO_GPU_TYPE:-a100}
fmt='' part=''
while (($#)); do
    case $1 in -o) fmt=$2; shift ;; -p) part=$2; shift ;; --format=*) fmt=${1#*=} ;; --partition=*) part=${1#*=} ;;
    esac
    shift
done
case $fmt in
%m) case $part in gpu) echo 128000 ;; cpu) echo 16000 ;; *) printf '128000\n16000\n' ;; esac ;;
%G) case $part in gpu) printf 'gpu:%s:4(S:0-1)\ngpu:%s:4(S:0-1),tmpdisk:100\n' "$gpu" "$gpu" ;;
    cpu) echo '(null)' ;; *) printf 'gpu:%s:4(S:0-1)\n(null)\n' "$gpu" ;; esac ;;
'%P|%N|%c|%G|%m|%l')
    printf 'gpu*|g1|64|gpu:%s:4(S:0-1)|128000|2-00:00:00\ngpu*|g2|64|gpu:%s:4(S:0-1),tmpdisk:100|128000|2-00:00:00\n' \
        "$gpu" "$gpu"
    printf 'cpu|c%s|8|(null)|16000|1:00:00\n' 1 2 3
    ;;
esac
