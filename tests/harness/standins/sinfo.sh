#!/bin/bash
# Stand-in sinfo for tests/test_jobs.py: partitions gpu (default; 2 nodes, 64 CPUs, 4 A100 each, 125 GiB,
# 2 days) and cpu (3 nodes of 8 CPUs, 15.6 GiB, 1 h); answers the formats jobs/submit.sh and the memory
# plan ask for (-N changes nothing).
set -euo pipefail
fmt='' part=''
while (($#)); do
    case $1 in -o) fmt=$2; shift ;; -p) part=$2; shift ;; --format=*) fmt=${1#*=} ;; --partition=*) part=${1#*=} ;;
    esac
    shift
done
case $fmt in
%P) printf 'gpu*\ncpu\n' ;;
%m) case $part in gpu) echo 128000 ;; cpu) echo 16000 ;; *) printf '128000\n16000\n' ;; esac ;;
%l) case $part in gpu) echo 2-00:00:00 ;; cpu) echo 1:00:00 ;; esac ;;
'%N %c %G')
    case $part in
    gpu) printf 'g1 64 gpu:a100:4(S:0-1)\ng2 64 gpu:a100:4(S:0-1),tmpdisk:100\n' ;;
    cpu) printf 'c1 8 (null)\nc2 8 (null)\nc3 8 (null)\n' ;;
    esac ;;
esac
