#!/bin/sh
# The agent image's entrypoint: enroll once, then `mirbad-agent serve`. docs/deploy.md, Compose.
#
# The first start needs a join token: MIRBAD_JOIN_TOKEN, else the file MIRBAD_JOIN_TOKEN_FILE
# (default /run/mirbad-join/token), which the master's container of the same compose project writes;
# it is waited for up to MIRBAD_JOIN_WAIT_S seconds (default 300). Later starts find the identity in
# the state volume and need none.
#
#   MIRBAD_ENROLL_URL   the master's enroll listener (https://127.0.0.1:8443 by default)
#   MIRBAD_NODE_NAME    the node's name (default: the host name)
#   MIRBAD_AGENT_PORT   the agent's port (9443)
#   MIRBAD_AGENT_SAN    the name or address the master reaches it at (127.0.0.1), in its certificate
#   MIRBAD_MODELS_DIR   the model folder, mounted at its host path (vLLM containers get it from dockerd)
#   MIRBAD_CACHE_DIR    the cache vLLM containers get as /root/.cache, a host path too
#
# With arguments that are not options, they are run instead (`docker run IMAGE mirbad-agent enroll ...`).
set -eu

if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
    exec "$@"
fi

state=/var/lib/mirbad-agent
name="${MIRBAD_NODE_NAME:-$(hostname)}"

if [ ! -s "$state/agent.crt" ]; then
    token="${MIRBAD_JOIN_TOKEN:-}"
    token_file="${MIRBAD_JOIN_TOKEN_FILE:-/run/mirbad-join/token}"
    wait_s="${MIRBAD_JOIN_WAIT_S:-300}"
    waited=0
    while [ -z "$token" ] && [ ! -s "$token_file" ]; do
        if [ "$waited" -ge "$wait_s" ]; then
            echo "mirbad-agent-entrypoint: no join token in $token_file after ${wait_s} s. The master issues" \
                "one only while it has no node named $name: if that node was enrolled before with an" \
                "identity since lost, remove it on the master (or 'docker-compose down -v' to start over)" >&2
            exit 2
        fi
        sleep 1
        waited=$((waited + 1))
    done
    [ -n "$token" ] || token=$(cat "$token_file")
    mirbad-agent enroll --master "${MIRBAD_ENROLL_URL:-https://127.0.0.1:8443}" --token "$token" \
        --name "$name" --san "${MIRBAD_AGENT_SAN:-127.0.0.1}" --state-dir "$state"
    token=""
fi

set -- --state-dir "$state" --node-name "$name" --port "${MIRBAD_AGENT_PORT:-9443}" "$@"
if [ -n "${MIRBAD_MODELS_DIR:-}" ]; then
    set -- --model-root "$MIRBAD_MODELS_DIR" "$@"
fi
if [ -n "${MIRBAD_CACHE_DIR:-}" ]; then
    # vLLM containers mount it by its host path; the default (inside the state volume) has none.
    config=/tmp/mirbad-agent-compose.json
    MIRBAD_CACHE_DIR="$MIRBAD_CACHE_DIR" python3 -c \
        'import json, os, sys; json.dump({"docker": {"cache_host_path": os.environ["MIRBAD_CACHE_DIR"]}}, sys.stdout)' \
        >"$config"
    set -- --config "$config" "$@"
fi
exec mirbad-agent serve "$@"
