#!/usr/bin/env bash
# Stand-in for docker (test): records argv; `docker info` answers unless STANDIN_DOCKER_DAEMON=down.
set -u
{ printf 'docker'; printf '\x1f%s' "$@"; printf '\n'; } >>"$STANDIN_LOG"
case ${1:-} in
info)
    if [[ ${STANDIN_DOCKER_DAEMON:-up} != up ]]; then
        echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2
        exit 1
    fi
    ;;
build) if [[ ${STANDIN_FAIL_AT:-} == build ]]; then exit 1; fi ;;
esac
