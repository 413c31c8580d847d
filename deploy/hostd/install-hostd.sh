#!/bin/sh
# Install mirbad-hostd as a systemd service (run as root). docs/hostd.md describes every step.
#
#   MIRBAD_HOSTD_BIN   the installed mirbad-hostd (default: found on PATH)
#   MIRBAD_ETC         the configuration folder (default /etc/mirbad)
#
# Keeps an existing hostd.json (the whitelist's seed), tightens an existing hostd-deny.json to
# root-owned and go-w (hostd refuses to start otherwise), installs the unit and its tmpfiles.d entry,
# restarts hostd (which writes the whitelist on its first start) and prints the whitelist.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
etc=${MIRBAD_ETC:-/etc/mirbad}
bin=${MIRBAD_HOSTD_BIN:-$(command -v mirbad-hostd || true)}
unit_dir=/etc/systemd/system
state=/var/lib/mirbad-hostd/whitelist.json

if [ "$(id -u)" -ne 0 ]; then
    echo "install-hostd.sh: run as root" >&2
    exit 1
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "install-hostd.sh: mirbad-hostd not found; set MIRBAD_HOSTD_BIN" >&2
    exit 1
fi
if ! getent group docker >/dev/null; then
    echo "install-hostd.sh: no docker group; install Docker first (the socket belongs to it)" >&2
    exit 1
fi

install -d -m 0755 -o root -g root "$etc"
if [ -e "$etc/hostd.json" ]; then
    echo "keeping $etc/hostd.json as the seed"
else
    printf '{"services": []}\n' >"$etc/hostd.json"
    echo "wrote an empty seed $etc/hostd.json"
fi
chown root:root "$etc/hostd.json"
chmod go-w "$etc/hostd.json"
if [ -e "$etc/hostd-deny.json" ]; then
    chown root:root "$etc/hostd-deny.json"
    chmod go-w "$etc/hostd-deny.json"
    echo "tightened $etc/hostd-deny.json to root, go-w"
fi

sed "s|^ExecStart=/usr/local/bin/mirbad-hostd |ExecStart=$bin |" "$here/mirbad-hostd.service" \
    | sed "s|--state-dir=|--seed=$etc/hostd.json --deny-file=$etc/hostd-deny.json --state-dir=|" \
    >"$unit_dir/mirbad-hostd.service"
chmod 0644 "$unit_dir/mirbad-hostd.service"
install -m 0644 "$here/mirbad-hostd.tmpfiles.conf" /usr/lib/tmpfiles.d/mirbad-hostd.conf
systemd-tmpfiles --create /usr/lib/tmpfiles.d/mirbad-hostd.conf

systemctl daemon-reload
systemctl enable mirbad-hostd.service
systemctl restart mirbad-hostd.service

# The first start writes the whitelist; wait for it (bounded), then show owner, mode and entries.
tries=0
while [ ! -e "$state" ] && [ "$tries" -lt 30 ]; do
    tries=$((tries + 1))
    sleep 1
done
if [ ! -e "$state" ]; then
    echo "install-hostd.sh: hostd wrote no whitelist; see: journalctl -u mirbad-hostd" >&2
    exit 1
fi
stat -c '%U:%G %a %n' "$state"
python3 -c 'import json, sys; [print(" ", s["name"], s["unit"]) for s in json.load(open(sys.argv[1]))["services"]]' "$state"
