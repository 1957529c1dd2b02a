#!/usr/bin/env bash
# Installs the broker, lookup and admin-ui binaries, NSQ's utilities (nsq_to_file, nsq_tail,
# to_nsq, nsq_stat, nsq_to_nsq, nsq_to_http) and their systemd units on this host. Run from the
# repository root after `cargo build --release -p broker -p lookup -p admin-ui -p tools`, as root.
set -euo pipefail
cd "$(dirname "$0")/.."
id nsq >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin nsq
install -m 0755 target/release/broker /usr/local/bin/broker
install -m 0755 target/release/lookup /usr/local/bin/lookup
install -m 0755 target/release/admin-ui /usr/local/bin/admin-ui
for tool in nsq_to_file nsq_tail to_nsq nsq_stat nsq_to_nsq nsq_to_http; do
  install -m 0755 target/release/$tool /usr/local/bin/$tool
done
install -m 0644 deploy/broker.service /etc/systemd/system/broker.service
install -m 0644 deploy/lookup.service /etc/systemd/system/lookup.service
install -m 0644 deploy/admin-ui.service /etc/systemd/system/admin-ui.service
install -m 0644 'deploy/nsq_to_file@.service' '/etc/systemd/system/nsq_to_file@.service'
install -m 0644 'deploy/nsq_to_nsq@.service' '/etc/systemd/system/nsq_to_nsq@.service'
install -m 0644 'deploy/nsq_to_http@.service' '/etc/systemd/system/nsq_to_http@.service'
[ -f /etc/default/broker ] || install -m 0644 deploy/broker.env /etc/default/broker
[ -f /etc/default/lookup ] || install -m 0644 deploy/lookup.env /etc/default/lookup
[ -f /etc/default/admin-ui ] || install -m 0644 deploy/admin-ui.env /etc/default/admin-ui
[ -f /etc/default/nsq_to_file ] || install -m 0644 deploy/nsq_to_file.env /etc/default/nsq_to_file
[ -f /etc/default/nsq_to_nsq ] || install -m 0644 deploy/nsq_to_nsq.env /etc/default/nsq_to_nsq
[ -f /etc/default/nsq_to_http ] || install -m 0644 deploy/nsq_to_http.env /etc/default/nsq_to_http
install -d -m 0755 /usr/local/share/doc/broker
install -m 0644 README.md ARCHITECTURE.md /usr/local/share/doc/broker/
# The README's links point into docs/ (flags, configuration, TLS and AUTH, ...).
cp -R docs /usr/local/share/doc/broker/
# Both are README.md: the deploy guide gets its own name rather than overwriting the first.
install -m 0644 deploy/README.md /usr/local/share/doc/broker/DEPLOY.md
systemctl daemon-reload
echo "installed; edit /etc/default/broker, /etc/default/lookup and /etc/default/admin-ui, then:"
echo "  systemctl enable --now lookup broker admin-ui"
echo "and to archive a topic (settings in /etc/default/nsq_to_file):"
echo "  systemctl enable --now nsq_to_file@<topic>"
echo "to forward a topic to other brokers or to HTTP endpoints (settings in /etc/default/nsq_to_nsq,"
echo "/etc/default/nsq_to_http):  systemctl enable --now nsq_to_nsq@<topic>  (or nsq_to_http@<topic>)"
