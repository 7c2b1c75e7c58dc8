#!/usr/bin/env bash
# Stand-in for enroot (test): records argv, mimics files and containers, fails/sleeps on request.
set -u
cmd=${1:-}
{ printf 'enroot'; printf '\x1f%s' "$@"; printf '\n'; } >>"$STANDIN_LOG"
shift || true
state=$STANDIN_STATE
maybe_sleep() { if [[ ${STANDIN_SLEEP_AT:-} == "$cmd" ]]; then sleep 30; fi; }
maybe_fail() {
    if [[ ${STANDIN_FAIL_AT:-} == "$cmd" ]]; then
        echo "enroot $cmd: error: stand-in told to fail" >&2
        exit 1
    fi
}
case $cmd in
import | export)
    out='' args=()
    while (($#)); do
        case $1 in
        -o | --output) out=$2; shift 2 ;;
        *) args+=("$1"); shift ;;
        esac
    done
    [[ -n $out ]] || { echo "enroot $cmd: stand-in needs -o" >&2; exit 2; }
    [[ ! -e $out ]] || { echo "enroot $cmd: error: File already exists: $out" >&2; exit 1; }
    if [[ $cmd == export && ! -d $state/${args[0]} ]]; then echo "no such container" >&2; exit 1; fi
    printf 'hsqs first half of %s\n' "${args[0]}" >"$out"
    maybe_sleep
    maybe_fail
    printf 'second half\n' >>"$out"
    ;;
create)
    [[ $1 == --name ]] || { echo "stand-in wants create --name NAME IMAGE" >&2; exit 2; }
    name=$2 image=$3
    [[ -s $image ]] || { echo "enroot create: error: no such image $image" >&2; exit 1; }
    [[ ! -e $state/$name ]] || { echo "enroot create: error: $name exists" >&2; exit 1; }
    mkdir -p "$state/$name"
    maybe_fail
    ;;
start)
    name=
    while (($#)); do
        case $1 in
        --root | --rw) shift ;;
        -m | --mount | -e | --env) shift 2 ;;
        *) name=$1; break ;;
        esac
    done
    [[ -d $state/$name ]] || { echo "enroot start: error: no container $name" >&2; exit 1; }
    maybe_sleep
    maybe_fail
    ;;
remove)
    rc=0
    for n in "$@"; do
        [[ $n == -f || $n == --force ]] && continue
        if [[ -d $state/$n ]]; then rm -rf "${state:?}/$n"; else echo "enroot remove: no $n" >&2; rc=1; fi
    done
    exit "$rc"
    ;;
list) ls -1 "$state" ;;
version) echo 3.5.0 ;;
*) echo "enroot stand-in: unknown command $cmd" >&2; exit 2 ;;
esac
