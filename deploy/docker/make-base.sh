#!/usr/bin/env bash
# Make the local stand-in for python:3.11-slim-bookworm: a minimal Debian bookworm root built with
# mmdebstrap from Debian's packages and `docker import`ed as mirbad-base:bookworm-<hash>. For machines
# that reach Debian's archive but no container registry (CI); elsewhere the Dockerfile's default BASE
# (python:3.11-slim-bookworm) is the production base. docs/deploy.md, Container images.
#
# The tag's hash is of this file less its comments (the package list, the suite and every option are
# in it), so an unchanged script reuses the image and any change builds a new one. Prints the tag.
#
#   deploy/docker/make-base.sh            build unless the tag exists, print it
#   deploy/docker/make-base.sh --tag      print the tag only
#   deploy/docker/make-base.sh --rebuild  build even when the tag exists (newer Debian packages)
set -euo pipefail

SUITE=bookworm
# What the images need of the base, as python:3.11-slim-bookworm has it: Python 3.11 with venv (its
# ensurepip brings the pip the build stage installs with), CA certificates (the agent's downloads),
# tini (PID 1: forwards signals and reaps the llama-server children the agent runs), passwd
# (useradd), libgomp1 and libstdc++6 (llama-server: OpenMP, C++; the slim image has them via apt).
PACKAGES=python3,python3-venv,ca-certificates,tini,passwd,libgomp1,libstdc++6
REPOSITORY=mirbad-base

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
digest=$(grep -v '^[[:space:]]*#' "$here/make-base.sh" | sha256sum | cut -c1-12)
tag="$REPOSITORY:$SUITE-$digest"

case "${1:-}" in
    --tag) echo "$tag"; exit 0 ;;
    --rebuild) rebuild=1 ;;
    "") rebuild=0 ;;
    *) echo "make-base.sh: unknown option $1 (--tag, --rebuild)" >&2; exit 2 ;;
esac

if [ "$rebuild" = 0 ] && docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag"
    exit 0
fi
command -v mmdebstrap >/dev/null || { echo "make-base.sh: mmdebstrap is not installed (apt-get install mmdebstrap)" >&2; exit 1; }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# Documentation, manual pages and translations are of no use in a container; the copyright files stay.
# shellcheck disable=SC2016 # the hook's $1 (the root's path) is expanded by mmdebstrap, not here
mmdebstrap --quiet --variant=essential --include="$PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='rm -rf "$1"/var/cache/debconf/*-old "$1"/var/log/*.log' \
    "$SUITE" "$scratch/rootfs.tar" >&2
# The settings python:3.11-slim-bookworm has (UTF-8, no buffering of logs), so the images behave alike.
docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PYTHONUNBUFFERED=1' \
    --change 'CMD ["python3"]' \
    --message "mmdebstrap $SUITE: $PACKAGES" \
    "$scratch/rootfs.tar" "$tag" >/dev/null
# Older bases of this repository are dangling once nothing refers to them; keep the newest only.
for old in $(docker image ls "$REPOSITORY" --format '{{.Repository}}:{{.Tag}}'); do
    [ "$old" = "$tag" ] || docker image rm "$old" >/dev/null 2>&1 || true
done
echo "$tag"
