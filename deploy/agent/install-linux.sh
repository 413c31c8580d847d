#!/bin/bash
# Install the Mirbad node agent as a systemd service and join it to a fleet (run as root).
# docs/deploy.md describes every step.
#
#   install-linux.sh --master https://MASTER:8443 --token mbj1.… [--name NODE] [--san NAME_OR_IP]…
#                    [--model-root DIR]… [--agent-bin PATH] [--reenroll] [--root DIR]
#   install-linux.sh --uninstall [--purge] [--root DIR]
#
# Enrollment comes first, into a scratch folder: a bad, used or expired token exits with the agent's
# status (2) and the master's message, and nothing is installed. The new identity then goes straight
# into the state folder (root-owned until the user exists), since the token is spent: a later step that
# fails leaves it there, and a rerun without the token finishes the install with it. Then: the system
# user (sysusers.d), /etc/mirbad/agent.toml (kept when present), the unit (and a drop-in for model roots
# outside the state folder), enable and (re)start.
# Rerunning is safe: an enrolled node keeps its identity (no token needed), an existing agent.toml is
# kept, the unit is rewritten and the agent restarted; its models keep running (KillMode=process).
#
# --root DIR writes every file under DIR instead of / (staging, tests); systemctl is still called.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
systemd_src="$here/../systemd"
user=mirbad-agent
unit=mirbad-agent.service

usage() {
    sed -n '5,7p' "$0" | sed 's/^# *//' >&2
    exit 2
}

die() {
    echo "install-linux.sh: $1" >&2
    exit "${2:-1}"
}

root=/
master=""
token=""
name=""
bin=${MIRBAD_AGENT_BIN:-}
reenroll=0
uninstall=0
purge=0
sans=()
model_roots=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        --master) master=${2:?}; shift 2 ;;
        --token) token=${2:?}; shift 2 ;;
        --name) name=${2:?}; shift 2 ;;
        --san) sans+=("${2:?}"); shift 2 ;;
        --model-root) model_roots+=("${2:?}"); shift 2 ;;
        --agent-bin) bin=${2:?}; shift 2 ;;
        --root) root=${2:?}; shift 2 ;;
        --reenroll) reenroll=1; shift ;;
        --uninstall) uninstall=1; shift ;;
        --purge) purge=1; shift ;;
        -h | --help) usage ;;
        *) echo "install-linux.sh: unknown option $1" >&2; usage ;;
    esac
done

[ "$(id -u)" -eq 0 ] || die "run as root"
# "/" becomes "" so "$root/etc" reads /etc; --root DIR must be absolute (mktemp and the tools run elsewhere).
case "$root" in /*) ;; *) die "--root must be an absolute path, not $root" 2 ;; esac
root=${root%/}
etc="$root/etc/mirbad"
config="$etc/agent.toml"
state="$root/var/lib/mirbad-agent"
unit_dir="$root/etc/systemd/system"
dropin="$unit_dir/$unit.d"
sysusers="$root/usr/lib/sysusers.d/mirbad-agent.conf"
# The name the node enrolled with, kept beside its identity for a rerun that writes agent.toml.
name_file="$state/node-name"

uninstall_agent() {
    # A unit that was never installed is fine: uninstalling twice is not an error.
    systemctl disable --now "$unit" || echo "($unit was not running)"
    rm -f "$unit_dir/$unit" "$sysusers"
    rm -rf "$dropin"
    systemctl daemon-reload
    echo "removed $unit; models it started keep running: stop them in the portal first, or remove"
    echo "their containers (docker ps --filter label=mirbad.model) and llama-server processes by hand"
    if [ "$purge" -eq 1 ]; then
        rm -rf "$state" "$config"
        echo "removed $state (the node's identity) and $config; the master still lists the node:"
        echo "remove it there (Nodes page, DELETE /api/nodes/NODE)"
    else
        echo "kept $state (the node's identity) and $config: a reinstall needs no token (--purge removes them)"
    fi
    echo "the system user $user stays (files may still carry its uid): userdel $user removes it"
}

if [ "$uninstall" -eq 1 ]; then
    uninstall_agent
    exit 0
fi

# The unit runs with ProtectHome=yes: neither the agent nor a model root may live under a home.
under_home() {
    case "$1" in /home | /home/* | /root | /root/*) return 0 ;; *) return 1 ;; esac
}

[ -n "$bin" ] || bin=$(command -v mirbad-agent || true)
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    die "mirbad-agent not found; install it (docs/deploy.md) and pass --agent-bin"
fi
case "$bin" in /*) ;; *) die "--agent-bin must be an absolute path, not $bin" 2 ;; esac
! under_home "$bin" || die "$bin is under a home folder, which the service cannot see; install it in /opt" 2
[ "${#model_roots[@]}" -gt 0 ] || model_roots=(/var/lib/mirbad-agent/models)
for dir in "${model_roots[@]}"; do
    case "$dir" in /*) ;; *) die "--model-root must be an absolute path, not $dir" 2 ;; esac
    ! under_home "$dir" || die "--model-root $dir is under a home folder, which the service cannot see" 2
done

# 1. Enrollment, before anything is written: the token is checked by the master itself.
enrolled=0
[ -e "$state/agent.crt" ] && enrolled=1
scratch=$(mktemp -d "${TMPDIR:-/tmp}/mirbad-agent-install.XXXXXX")
saved=0
finish() {
    local status=$?
    rm -rf "$scratch"
    if [ "$status" -ne 0 ] && [ "$saved" -eq 1 ]; then
        echo "install-linux.sh: the install stopped after enrollment (exit $status); the node's identity" >&2
        echo "is kept in $state: rerun without --token to finish" >&2
    fi
}
trap finish EXIT
node=""
if [ "$enrolled" -eq 0 ] || [ "$reenroll" -eq 1 ]; then
    if [ -z "$master" ] || [ -z "$token" ]; then
        die "--master and --token are required to enroll this node" 2
    fi
    args=(enroll --master "$master" --token "$token" --state-dir "$scratch/identity")
    [ -z "$name" ] || args+=(--name "$name")
    for san in "${sans[@]}"; do args+=(--san "$san"); done
    status=0
    "$bin" "${args[@]}" >"$scratch/enroll.out" || status=$?
    if [ "$status" -ne 0 ]; then
        echo "install-linux.sh: enrollment failed (exit $status); nothing was installed" >&2
        exit "$status"
    fi
    cat "$scratch/enroll.out"
    node=$(sed -n 's/^enrolled as node \([^ ]*\) with .*/\1/p' "$scratch/enroll.out")
    # The token is spent: keep what it bought before anything else can fail.
    install -d -m 0755 "$root/var/lib"
    install -d -m 0700 "$state"
    install -m 0600 "$scratch/identity/agent.key" "$state/agent.key"
    install -m 0644 "$scratch/identity/agent.crt" "$scratch/identity/agent-ca.crt" "$state/"
    [ -z "$node" ] || printf '%s\n' "$node" >"$name_file"
    saved=1
else
    [ -z "$token" ] || echo "already enrolled: the token was not used (--reenroll replaces the identity)"
    [ ! -e "$name_file" ] || node=$(cat "$name_file")
fi

# 2. The system user, in the docker group where Docker is installed (the socket's group).
# systemd-sysusers --root needs the root's etc/ (an empty staging folder has none).
install -d -m 0755 "$root/etc" "$(dirname "$sysusers")"
grep -v '^#' "$systemd_src/mirbad-agent.sysusers.conf" >"$sysusers"
if grep -q '^docker:' "$root/etc/group" 2>/dev/null; then
    echo "m $user docker" >>"$sysusers"
else
    echo "no docker group: the agent runs native models only (rerun after installing Docker)"
fi
chmod 0644 "$sysusers"
systemd-sysusers --root="${root:-/}" "$(basename "$sysusers")"
ids=$(awk -F: -v u="$user" '$1 == u { print $3 ":" $4 }' "$root/etc/passwd")
[ -n "$ids" ] || die "systemd-sysusers made no user $user"

# 3. Folders, the identity, the settings.
install -d -m 0755 "$etc"
install -d -m 0700 "$state"
for dir in "${model_roots[@]}"; do
    [ -d "$root$dir" ] || { install -d -m 0750 "$root$dir"; chown "$ids" "$root$dir"; }
done
chown -R "$ids" "$state"
if [ -e "$config" ]; then
    echo "keeping $config"
else
    {
        echo "# Written by install-linux.sh; docs/agent.md lists every setting."
        [ -z "$node" ] || echo "node_name = \"$node\""
        echo "state_dir = \"/var/lib/mirbad-agent\""
        printf 'model_roots = ['
        sep=""
        for dir in "${model_roots[@]}"; do printf '%s"%s"' "$sep" "$dir"; sep=", "; done
        echo "]"
    } >"$config"
    chmod 0644 "$config"
    install -d -m 0755 "$dropin"
    # ProtectSystem=strict leaves only the state folder writable; downloads write into the roots.
    extra=()
    for dir in "${model_roots[@]}"; do
        case "$dir" in /var/lib/mirbad-agent | /var/lib/mirbad-agent/*) ;; *) extra+=("-$dir") ;; esac
    done
    rm -f "$dropin/model-roots.conf"
    if [ "${#extra[@]}" -gt 0 ]; then
        printf '[Service]\nReadWritePaths=%s\n' "${extra[*]}" >"$dropin/model-roots.conf"
        chmod 0644 "$dropin/model-roots.conf"
    fi
    echo "wrote $config"
fi

# 4. The unit, then (re)start: a rerun after an upgrade runs the new agent, which adopts the models.
install -d -m 0755 "$unit_dir"
sed "s|^ExecStart=/usr/local/bin/mirbad-agent |ExecStart=$bin |" "$systemd_src/$unit" >"$unit_dir/$unit"
chmod 0644 "$unit_dir/$unit"
systemctl daemon-reload
systemctl enable "$unit"
systemctl restart "$unit"
echo "mirbad-agent is installed and started; its log: journalctl -u $unit"
