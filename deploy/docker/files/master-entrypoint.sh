#!/bin/sh
# The master image's entrypoint: `mirbad up` (the portal, /api, /v1, the enroll listener and the
# master's own empty node "local"), with, for docker-compose, the password and the first join of the
# machine's agent done without a manual step. docs/deploy.md, Compose.
#
#   MIRBAD_ADMIN_PASSWORD  when set, becomes the administrator password at every start (12+ chars)
#   MIRBAD_JOIN_NODE       when set, the node the agent container joins as: a one-time join token for
#                          it is left in MIRBAD_JOIN_TOKEN_FILE until that node is registered
#   MIRBAD_JOIN_AGENT_URL  where that node's agent answers (https://127.0.0.1:9443 by default)
#
# Anything else is `mirbad up`'s own setting (MIRBAD_PORT, MIRBAD_ENROLL_PORT ... docs/api.md). With
# arguments that are not options, they are run instead (`docker run IMAGE mirbad admin ...`).
set -eu

if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
    exec "$@"
fi

data="${MIRBAD_DATA_DIR:-/var/lib/mirbad}"
password="${MIRBAD_ADMIN_PASSWORD:-}"
# Neither `mirbad up` nor the models it runs need to see the password.
unset MIRBAD_ADMIN_PASSWORD
if [ -n "$password" ]; then
    printf '%s\n' "$password" | mirbad admin reset-password --data-dir "$data" --password-file -
fi

mirbad up --data-dir "$data" --agent-config /etc/mirbad/local-agent.json "$@" &
up=$!
# SIGTERM (docker stop, compose down) goes to `mirbad up` alone: it stops its models, then its agent.
trap 'kill -TERM "$up" 2>/dev/null || true' TERM INT

if [ -n "${MIRBAD_JOIN_NODE:-}" ]; then
    if [ -z "$password" ]; then
        echo "mirbad-master-entrypoint: MIRBAD_JOIN_NODE needs MIRBAD_ADMIN_PASSWORD to issue its join token" >&2
    else
        printf '%s\n' "$password" | mirbad-compose-join \
            --node "$MIRBAD_JOIN_NODE" \
            --agent-url "${MIRBAD_JOIN_AGENT_URL:-https://127.0.0.1:9443}" \
            --token-file "${MIRBAD_JOIN_TOKEN_FILE:-/run/mirbad-join/token}" &
    fi
fi
password=""

# `wait` returns early when the trap runs; keep waiting until `mirbad up` itself has ended.
status=0
wait "$up" || status=$?
while kill -0 "$up" 2>/dev/null; do
    status=0
    wait "$up" || status=$?
done
exit "$status"
