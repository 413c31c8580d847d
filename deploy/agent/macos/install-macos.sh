#!/bin/bash
# Install the Mirbad node agent as the LaunchDaemon com.mirbad.agent and join it to a fleet (run with
# sudo). docs/deploy.md describes every step.
#
#   sudo install-macos.sh --master https://MASTER:8443 --token mbj1.… [--name NODE] [--san NAME_OR_IP]…
#                         [--model-root DIR] [--agent-bin PATH] [--reenroll]
#   sudo install-macos.sh --uninstall [--purge]
#
# The same order as install-linux.sh: enrollment first, into a scratch folder, so a bad, used or
# expired token exits 2 with the master's message and nothing is installed; then the hidden system
# user _mirbadagent, the folders, the settings (kept when present), the plist, and launchctl.
# macOS ships bash 3.2: no `set -u` (an empty array would trip it there), no bash 4 features.
set -eo pipefail

here=$(cd "$(dirname "$0")" && pwd)
label=com.mirbad.agent
user=_mirbadagent
support="/Library/Application Support/Mirbad"
state="$support/agent"
config="$support/agent.toml"
logs=/Library/Logs/Mirbad
plist="/Library/LaunchDaemons/$label.plist"

die() {
    echo "install-macos.sh: $1" >&2
    exit "${2:-1}"
}

master=""
token=""
name=""
bin=${MIRBAD_AGENT_BIN:-}
model_root="$state/models"
reenroll=0
uninstall=0
purge=0
sans=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        --master) master=$2; shift 2 ;;
        --token) token=$2; shift 2 ;;
        --name) name=$2; shift 2 ;;
        --san) sans+=("$2"); shift 2 ;;
        --model-root) model_root=$2; shift 2 ;;
        --agent-bin) bin=$2; shift 2 ;;
        --reenroll) reenroll=1; shift ;;
        --uninstall) uninstall=1; shift ;;
        --purge) purge=1; shift ;;
        *) die "unknown option $1 (see the top of this script)" 2 ;;
    esac
done

[ "$(id -u)" -eq 0 ] || die "run with sudo"

if [ "$uninstall" -eq 1 ]; then
    launchctl bootout "system/$label" 2>/dev/null || echo "($label was not loaded)"
    rm -f "$plist"
    echo "removed $label; models it started keep running: stop them in the portal first"
    if [ "$purge" -eq 1 ]; then
        rm -rf "$state" "$config"
        echo "removed $state (the node's identity) and $config; remove the node on the master too"
    else
        echo "kept $state and $config: a reinstall needs no token (--purge removes them)"
    fi
    echo "the user $user stays: sudo dscl . -delete /Users/$user removes it"
    exit 0
fi

[ -n "$bin" ] || bin=$(command -v mirbad-agent || true)
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    die "mirbad-agent not found; install it (docs/deploy.md) and pass --agent-bin"
fi
case "$bin" in /*) ;; *) die "--agent-bin must be an absolute path, not $bin" 2 ;; esac
case "$model_root" in /*) ;; *) die "--model-root must be an absolute path, not $model_root" 2 ;; esac

# 1. Enrollment, before anything is written.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/mirbad-agent-install.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
node=""
if [ ! -e "$state/agent.crt" ] || [ "$reenroll" -eq 1 ]; then
    if [ -z "$master" ] || [ -z "$token" ]; then
        die "--master and --token are required to enroll this node" 2
    fi
    args=(enroll --master "$master" --token "$token" --state-dir "$scratch/identity")
    [ -z "$name" ] || args+=(--name "$name")
    for san in "${sans[@]}"; do args+=(--san "$san"); done
    status=0
    "$bin" "${args[@]}" >"$scratch/enroll.out" || status=$?
    if [ "$status" -ne 0 ]; then
        echo "install-macos.sh: enrollment failed (exit $status); nothing was installed" >&2
        exit "$status"
    fi
    cat "$scratch/enroll.out"
    node=$(sed -n 's/^enrolled as node \([^ ]*\) with .*/\1/p' "$scratch/enroll.out")
elif [ -n "$token" ]; then
    echo "already enrolled: the token was not used (--reenroll replaces the identity)"
fi

# 2. A hidden system user and group (ids below 500 keep it off the login window).
free_id() {
    used=$( (dscl . -list /Users UniqueID; dscl . -list /Groups PrimaryGroupID) | awk '{ print $2 }')
    for candidate in $(seq 300 499); do
        if ! printf '%s\n' "$used" | grep -qx "$candidate"; then
            echo "$candidate"
            return
        fi
    done
    die "no free id between 300 and 499 for $user"
}
if ! dscl . -read "/Users/$user" >/dev/null 2>&1; then
    id=$(free_id)
    dscl . -create "/Groups/$user" PrimaryGroupID "$id"
    dscl . -create "/Groups/$user" Password '*'
    dscl . -create "/Users/$user" UniqueID "$id"
    dscl . -create "/Users/$user" PrimaryGroupID "$id"
    dscl . -create "/Users/$user" UserShell /usr/bin/false
    dscl . -create "/Users/$user" NFSHomeDirectory "$state"
    dscl . -create "/Users/$user" RealName "Mirbad node agent"
    dscl . -create "/Users/$user" IsHidden 1
    dscl . -create "/Users/$user" Password '*'
    echo "created the user $user (id $id)"
fi

# 3. Folders, the identity, the settings.
install -d -m 0755 -o root -g wheel "$support"
install -d -m 0700 -o "$user" -g "$user" "$state"
install -d -m 0750 -o "$user" -g "$user" "$logs"
[ -d "$model_root" ] || install -d -m 0750 -o "$user" -g "$user" "$model_root"
if [ -n "$node" ]; then
    install -m 0600 -o "$user" -g "$user" "$scratch/identity/agent.key" "$state/agent.key"
    install -m 0644 -o "$user" -g "$user" "$scratch/identity/agent.crt" "$scratch/identity/agent-ca.crt" "$state/"
fi
if [ -e "$config" ]; then
    echo "keeping $config"
else
    {
        echo "# Written by install-macos.sh; docs/agent.md lists every setting."
        [ -z "$node" ] || echo "node_name = \"$node\""
        echo "state_dir = \"$state\""
        echo "model_roots = [\"$model_root\"]"
        echo "[docker]"
        echo "enabled = false"
    } >"$config"
    chown root:wheel "$config"
    chmod 0644 "$config"
    echo "wrote $config"
fi

# 4. The LaunchDaemon, then (re)start it: a rerun after an upgrade runs the new agent.
sed "s|<string>/usr/local/bin/mirbad-agent</string>|<string>$bin</string>|" "$here/$label.plist" >"$plist"
chown root:wheel "$plist"
chmod 0644 "$plist"
plutil -lint "$plist"
launchctl bootout "system/$label" 2>/dev/null || true
launchctl bootstrap system "$plist"
launchctl enable "system/$label"
launchctl kickstart -k "system/$label"
echo "mirbad-agent is installed and started; its log: $logs/agent.log"
