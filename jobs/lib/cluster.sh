# shellcheck shell=bash
# make submit's request against what the cluster offers, asked of sinfo once (jobs/submit.sh); small checks,
# each of one limit, each reading the same answer and adding a `problem` (lib/checks.sh) when it is exceeded.
#
#   source "$root/jobs/lib/cluster.sh"
#   ask_sinfo                     one sinfo call: a line per node of each partition, PARTITION|NODE|CPUS|GRES|MB|LIMIT
#                                 (the default partition ends in '*'); status 1 and its first error line when it fails
#   cluster_partition NODES_TABLE PARTITION    the partition to check (PARTITION, else the default), or nothing
#   check_partition NODES_TABLE PART           PART is a partition of the cluster
#   check_node_fit NODES_TABLE PART NODES GPUS CPUS_PER_TASK GPUS_PER_TASK   enough nodes with the CPUs and GPUs
#   check_memory_fit NODES_TABLE PART MEM     MEM per node within the largest node's memory
#   check_time_fit NODES_TABLE PART TIME      TIME within the partition's limit
#   cpus_per_gpu NODES_TABLE PART             the CPUs a GPU has on the partition's nodes (their CPUs / their GPUs,
#                                             the least), or nothing where no node has a GPU
#   max_array_size                the cluster's MaxArraySize (scontrol show config), or nothing where it does not say
#
# NODES_TABLE is ask_sinfo's answer (sort -u'd); nothing here sets a global variable.

# ask_sinfo: the nodes of every partition, one sinfo call; when it fails, its first error line (stdout) and status 1.
ask_sinfo() {
    local out status=0
    out=$(sinfo -h -N -o '%P|%N|%c|%G|%m|%l' 2>&1) || status=$?
    if ((status != 0)); then
        out=${out%%$'\n'*}
        printf '%s\n' "${out#sinfo: }"
        return 1
    fi
    sort -u <<<"$out"
}

# max_array_size: MaxArraySize of `scontrol show config` (a job array's indices stay below it); nothing (status 0)
# where scontrol does not answer or names none.
max_array_size() {
    local config
    config=$(scontrol show config 2>/dev/null) || return 0
    sed -n 's/^MaxArraySize *= *\([0-9][0-9]*\) *$/\1/p' <<<"$config" | head -n 1
}

# partition_rows NODES_TABLE PART: the table's lines of partition PART ('*' of the default dropped).
partition_rows() {
    local part line
    while IFS='|' read -r part line; do
        [[ ${part%'*'} != "$2" ]] || printf '%s\n' "$line"
    done <<<"$1"
}

partitions() { cut -d'|' -f1 <<<"$1" | sort -u; }

cluster_partition() {
    if [[ -n $2 ]]; then
        printf '%s\n' "$2"
    else
        partitions "$1" | sed -n 's/[*]$//p' | head -n 1
    fi
}

check_partition() {
    partitions "$1" | sed 's/[*]$//' | grep -qxF -- "$2" && return 0
    problem "PARTITION='$2' is not a partition of this cluster; its partitions are: $(partitions "$1" | sed 's/[*]$//' | paste -sd ' ')."
    return 1
}

# node_gpus GRES: the GPUs of one node's generic resources (gpu:4, gpu:a100:4(S:0-1),tmpdisk:100, (null)).
node_gpus() {
    local item gpus=0
    local -a items
    IFS=, read -r -a items <<<"$1"
    for item in "${items[@]}"; do
        item=${item%%(*}
        [[ ! $item =~ ^gpu(:[^:]+)?:([0-9]{1,6})$ ]] || gpus=$((gpus + 10#${BASH_REMATCH[2]}))
    done
    echo "$gpus"
}

# check_node_fit NODES_TABLE PART NODES GPUS CPUS_PER_TASK GPUS_PER_TASK: enough nodes, with the CPUs and GPUs
# that GPUS/NODES tasks of CPUS_PER_TASK (empty: the cluster's default, one) and GPUS_PER_TASK each need.
check_node_fit() {
    local part=$2 nodes=$3 all=$4 cpus_given=$5 name cpus gres _rest gpus
    local per_node=$(($4 / $3)) cpus_each=${5:-1} total=0 fit_cpu=0 fit_gpu=0 most_cpus=0 most_gpus=0
    local need_gpus=$((per_node * $6))
    while IFS='|' read -r name cpus gres _rest; do
        [[ -n $name && $cpus =~ ^[0-9]{1,9}$ ]] || continue
        total=$((total + 1))
        gpus=$(node_gpus "$gres")
        ((cpus > most_cpus)) && most_cpus=$cpus
        ((gpus > most_gpus)) && most_gpus=$gpus
        ((cpus >= per_node * cpus_each)) && fit_cpu=$((fit_cpu + 1))
        ((gpus >= need_gpus && cpus >= per_node * cpus_each)) && fit_gpu=$((fit_gpu + 1))
    done < <(partition_rows "$1" "$part")
    if ((nodes > total)); then
        problem "NODES=$nodes: partition '$part' has only $total node(s); use NODES=$total or less (PARTITION= picks another partition)."
    elif ((fit_cpu < nodes)); then
        problem "CPUS_PER_TASK=${cpus_given:-1 (default)} x $per_node tasks per node = $((per_node * cpus_each)) CPUs per node, but the nodes of partition '$part' have at most $most_cpus CPUs ($fit_cpu node(s) fit, NODES=$nodes); use CPUS_PER_TASK=$((most_cpus / per_node > 0 ? most_cpus / per_node : 1)) or fewer tasks per node (more NODES)."
    elif ((need_gpus > 0 && fit_gpu < nodes)); then
        problem "GPUS=$all over NODES=$nodes asks $need_gpus GPUs per node, but the nodes of partition '$part' have at most $most_gpus GPU(s) ($fit_gpu node(s) fit); use more NODES, fewer GPUS, or GPUS_PER_TASK=0 on a CPU-only partition."
    fi
}

# check_memory_fit NODES_TABLE PART MEM: sinfo's %m is megabytes; 1 or less: RealMemory is not configured.
check_memory_fit() {
    local most
    [[ -n $3 ]] || return 0
    most=$(partition_rows "$1" "$2" | cut -d'|' -f4 | tr -dc '0-9\n' | sed -n '/^[0-9]\{1,12\}$/p' | sort -n | tail -n 1)
    if [[ -n $most ]] && ((most > 1)) && (($(memory_mb "$3") > most)); then
        problem "MEM='$3' is more than the nodes of partition '$2' have (at most ${most} MB each); use MEM=${most}M or less, or MEM=0 for all of a node's memory."
    fi
}

check_time_fit() {
    local max limit
    [[ -n $3 ]] || return 0
    max=$(partition_rows "$1" "$2" | cut -d'|' -f5 | sort -u | head -n 1)
    if limit=$(time_seconds "$max" 2>/dev/null) && ((limit >= 0)) && (($(time_seconds "$3") > limit)); then
        problem "TIME='$3' is above the time limit of partition '$2' ($max); use TIME=$max or less."
    fi
}

# cpus_per_gpu NODES_TABLE PART: each node's CPUs divided by its GPUs, the least over the partition's GPU nodes (so
# every node gives it), on stdout; nothing where no node of PART has a GPU.
cpus_per_gpu() {
    local name cpus gres _rest gpus least=
    while IFS='|' read -r name cpus gres _rest; do
        [[ -n $name && $cpus =~ ^[0-9]{1,9}$ ]] || continue
        gpus=$(node_gpus "$gres")
        ((gpus > 0)) || continue
        if [[ -z $least ]] || ((cpus / gpus < least)); then
            least=$((cpus / gpus))
        fi
    done < <(partition_rows "$1" "$2")
    [[ -z $least ]] || echo "$((least > 0 ? least : 1))"
}
