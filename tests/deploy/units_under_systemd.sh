#!/usr/bin/env bash
# Runs deploy/'s hardened units, or the Debian package, under a real systemd, on a host where
# systemd is not PID 1 (a CI container, a VM with another init). It boots systemd in a
# throw-away container: systemd-nspawn on an overlay of this host's root whose writes go to a
# tmpfs (dropped at the end), with a private network. Then
#
#   units (default): the units of deploy/ are installed there with ExecStart naming the built
#   binaries (bind-mounted), and
#   --deb FILE: the package is installed there with dpkg (its postinst as on a real host:
#   adduser, deb-systemd-helper, systemctl), and checked: the nsq system user, the data
#   directories, no unit enabled or started; the settings in /etc/default are then edited;
#
#   1. every unit is started (lookup, broker, admin-ui, nsq_to_file@events, nsq_to_nsq@events,
#      nsq_to_http@events) and checked: active; a seccomp filter, no new privileges, no
#      capabilities, io_uring rings open (every binary but admin-ui's);
#   2. 200 messages are published and followed through every process: nsq_to_nsq copied them,
#      nsq_to_http POSTed them, every channel finished them, the lookup and admin-ui see the
#      broker;
#   3. --deb: the package is installed again (an upgrade): every unit restarted, the settings
#      kept; it is removed: every unit stopped cleanly, data and settings kept; it is purged:
#      data, settings and enable links gone, the user kept.
#      units: every unit is stopped (SIGTERM) and checked: Result=success, status 0, no
#      restart; the file nsq_to_file wrote (owner nsq, mode 0640), the broker's data files
#      (UMask=0027); then each unit's binary runs again through `systemd-run --wait --pipe`
#      with every property of its unit's [Service] section given as `-p`, answers, and exits 0
#      on SIGTERM;
#   4. the units' journals are searched for what the sandbox refused: a system call (SIGSYS,
#      EPERM from seccomp), a hidden or read-only path.
#
# Nothing on this host changes. Root only; 5 to 15 s. Exits 77 where systemd cannot boot in a
# container (tests/deploy/test_units.py and test_deb.py skip then). deploy/README.md,
# "Hardening" and "The Debian package", give what it found.
#
#   tests/deploy/units_under_systemd.sh [--deb FILE] [BUILD_DIR]   (default target/release)
#   DEPLOY_DIR=dir tests/deploy/units_under_systemd.sh              other units (default deploy/)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SELF="$REPO/tests/deploy/$(basename "${BASH_SOURCE[0]}")"

fail() { echo "units_under_systemd: $*" >&2; exit 1; }
# Where systemd cannot be booted in a container at all: 77, a skip for the tests.
cannot() { echo "units_under_systemd: $*" >&2; exit 77; }

DEB=""
BUILD_ARG=""
while [ $# -gt 0 ]; do
  case "$1" in
    --deb)
      [ $# -ge 2 ] || fail "--deb needs a file"
      DEB="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
      [ -f "$DEB" ] || fail "no package $2"
      shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$SELF" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    -*) fail "unknown argument '$1' (usage: [--deb FILE] [BUILD_DIR])" ;;
    *) BUILD_ARG="$1" ;;
  esac
  shift
done
BUILD="$(cd "${BUILD_ARG:-$REPO/target/release}" && pwd)"
DEPLOY="$(cd "${DEPLOY_DIR:-$REPO/deploy}" && pwd)"

[ "$(id -u)" = 0 ] || cannot "needs root (systemd-nspawn)"
command -v systemd-nspawn >/dev/null 2>&1 || cannot "needs systemd-nspawn (apt-get install systemd-container)"
command -v unshare >/dev/null 2>&1 || cannot "needs unshare (util-linux)"
if [ -z "$DEB" ]; then
  for b in broker lookup admin-ui nsq_to_file nsq_to_nsq nsq_to_http; do
    [ -x "$BUILD/$b" ] || fail "no $BUILD/$b: cargo build --release -p broker -p lookup -p admin-ui -p tools"
  done
fi

# The rest runs in a mount namespace of its own: the overlay goes with it.
if [ -z "${UNITS_UNDER_SYSTEMD_NS:-}" ]; then
  exec unshare --mount --propagation private env UNITS_UNDER_SYSTEMD_NS=1 DEPLOY_DIR="$DEPLOY" \
    bash "$SELF" ${DEB:+--deb "$DEB"} "$BUILD"
fi

MACHINE="nsq-units-$$"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/units-under-systemd.XXXXXX")"
NSPAWN_PID=""
LEADER=""
FAILURES=0

check() { # description, command...
  local what="$1"
  shift
  if "$@"; then
    echo "ok   $what"
  else
    echo "FAIL $what"
    FAILURES=$((FAILURES + 1))
  fi
}

cleanup() {
  if [ -n "$LEADER" ]; then
    nsenter -t "$LEADER" -a systemctl poweroff >/dev/null 2>&1 || true
  fi
  if [ -n "$NSPAWN_PID" ]; then
    for _ in $(seq 1 100); do
      kill -0 "$NSPAWN_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$NSPAWN_PID" 2>/dev/null || true
    wait "$NSPAWN_PID" 2>/dev/null || true
  fi
  umount -R "$WORK/fs" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# inside CMD...: a command inside the container (all its namespaces).
inside() { nsenter -t "$LEADER" -a "$@"; }

# ---- the container ---------------------------------------------------------------------------
# This host's root file system as the lower layer, a tmpfs as the upper: the container may
# install packages and create users, and all of it is dropped.
mkdir -p "$WORK/fs"
mount -t tmpfs tmpfs "$WORK/fs" || cannot "cannot mount a tmpfs"
mkdir -p "$WORK/fs/upper" "$WORK/fs/work" "$WORK/fs/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$WORK/fs/upper,workdir=$WORK/fs/work" "$WORK/fs/root" ||
  cannot "cannot mount an overlay of / (overlayfs)"
BINDS=(--bind-ro="$DEPLOY:/opt/nsq-deploy")
[ -n "$DEB" ] || BINDS+=(--bind-ro="$BUILD:/opt/nsq-bin")
[ -z "$DEB" ] || { cp "$DEB" "$WORK/fs/root/root/package.deb"; }
systemd-nspawn --quiet --register=no --keep-unit --link-journal=no --private-network \
  --machine="$MACHINE" -D "$WORK/fs/root" "${BINDS[@]}" \
  -b systemd.unit=basic.target > "$WORK/console.log" 2>&1 &
NSPAWN_PID=$!
state=""
for _ in $(seq 1 300); do
  LEADER="$({ ps -o pid= --ppid "$NSPAWN_PID" || true; } | tr -d ' ' | head -n 1)"
  if [ -n "$LEADER" ]; then
    state="$(nsenter -t "$LEADER" -a systemctl is-system-running 2>/dev/null || true)"
    case "$state" in running|degraded) break ;; esac
  fi
  kill -0 "$NSPAWN_PID" 2>/dev/null || { cat "$WORK/console.log" >&2; cannot "the container did not boot"; }
  sleep 0.1
done
case "$state" in
  running|degraded) ;;
  *) cannot "the container's systemd did not come up within 30 s (state '$state')" ;;
esac
echo "systemd $(inside systemctl --version | head -n 1 | cut -d' ' -f2) booted in a container (pid $LEADER)"

UNITS=(lookup.service broker.service admin-ui.service nsq_to_file@events.service
       nsq_to_nsq@events.service nsq_to_http@events.service)
N=200

http_ok() { inside curl -fsS -o /dev/null --max-time 2 "$1" 2>/dev/null; }
wait_for() { # seconds, command...
  local t=$(($1 * 10))
  shift
  while [ "$t" -gt 0 ]; do
    if "$@"; then return 0; fi
    sleep 0.1
    t=$((t - 1))
  done
  return 1
}
active() { [ "$(inside systemctl is-active "$1" 2>/dev/null)" = active ]; }
inactive() { [ "$(inside systemctl is-active "$1" 2>/dev/null)" = inactive ]; }
prop() { inside systemctl show -P "$2" "$1"; }
# stats TOPIC EXPR: EXPR (Python, T the topic's object in the broker's /stats) holds.
stats() {
  inside python3 -c '
import json, sys, urllib.request
url = "http://127.0.0.1:4151/stats?format=json&topic=" + sys.argv[1]
d = json.load(urllib.request.urlopen(url, timeout=2))
T = next((t for t in d["topics"] if t["topic_name"] == sys.argv[1]), None)
sys.exit(0 if T is not None and eval(sys.argv[2]) else 1)
' "$1" "$2" 2>/dev/null
}

# ---- the units and one host's settings -------------------------------------------------------
if [ -n "$DEB" ]; then
  # Docker's images forbid starting services from packages (policy-rc.d exits 101); a real
  # host has no such file.
  inside rm -f /usr/sbin/policy-rc.d
  inside sh -c 'DEBIAN_FRONTEND=noninteractive dpkg -i /root/package.deb' > "$WORK/dpkg.log" 2>&1 ||
    { cat "$WORK/dpkg.log"; fail "dpkg -i failed"; }
  account="$(inside getent passwd nsq || true)"
  check "postinst made nsq a system user without login ($account)" \
    test "$(cut -d: -f6,7 <<< "$account")" = "/nonexistent:/usr/sbin/nologin" -a \
    "$(cut -d: -f3 <<< "$account")" -lt 1000 -a -n "$(inside getent group nsq || true)"
  check "postinst made /var/lib/broker and /var/lib/nsq_to_file (nsq's, 0750)" test \
    "$(inside stat -c '%U:%G:%a' /var/lib/broker /var/lib/nsq_to_file | sort -u)" = "nsq:nsq:750"
  for u in broker.service lookup.service admin-ui.service; do
    check "$u installed, neither enabled nor started" test \
      "$(inside systemctl is-enabled "$u" 2>/dev/null || true)/$(inside systemctl is-active "$u" 2>/dev/null || true)" = "disabled/inactive"
  done
else
  inside useradd --system --no-create-home --shell /usr/sbin/nologin nsq
  # shellcheck disable=SC2016 # expanded inside the container
  inside sh -eu -c '
    for f in /opt/nsq-deploy/*.service; do
      sed -e "s#/usr/local/bin/#/opt/nsq-bin/#" "$f" > "/etc/systemd/system/$(basename "$f")"
    done
    for f in /opt/nsq-deploy/*.env; do
      cp "$f" "/etc/default/$(basename "$f" .env)"
    done'
fi
# Every address on this one host (later lines of a settings file win).
inside sh -eu -c '
  cat >> /etc/default/lookup <<EOF
LOOKUP_TCP_ADDRESS=127.0.0.1:4160
LOOKUP_HTTP_ADDRESS=127.0.0.1:4161
LOOKUP_BROADCAST_ADDRESS=127.0.0.1
EOF
  cat >> /etc/default/broker <<EOF
BROKER_TCP_ADDRESS=127.0.0.1:4150
BROKER_HTTP_ADDRESS=127.0.0.1:4151
BROKER_BROADCAST_ADDRESS=127.0.0.1
BROKER_LOOKUPD_FLAGS=--lookupd-tcp-address=127.0.0.1:4160
EOF
  cat >> /etc/default/admin-ui <<EOF
ADMIN_UI_HTTP_ADDRESS=127.0.0.1:4171
ADMIN_UI_UPSTREAMS=--lookupd-http-address=127.0.0.1:4161
EOF
  cat >> /etc/default/nsq_to_nsq <<EOF
NSQ_TO_NSQ_FLAGS="--destination-nsqd-tcp-address=127.0.0.1:4150 --destination-topic=events-copy"
EOF
  # nsq_to_file rotates every 10 messages here, so that files reach the output dir.
  cat >> /etc/default/nsq_to_file <<EOF
NSQ_TO_FILE_FLAGS="--channel=nsq_to_file --gzip --rotate-size=1 --max-in-flight=10 --filename-format=<TOPIC>.<HOST><REV>.<DATETIME>.log"
EOF
  systemctl daemon-reload'
# nsq_to_http's destination (nsq_to_http.env: POST to 127.0.0.1:8080/events).
inside systemd-run --quiet --unit=http-sink python3 -c '
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open("/run/http-sink.log", "ab") as f:
            f.write(body + b"\n")
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 8080), H).serve_forever()
'

# ---- 1. start --------------------------------------------------------------------------------
inside systemctl start lookup.service broker.service admin-ui.service
check "lookup answers /ping" wait_for 15 http_ok http://127.0.0.1:4161/ping
check "broker answers /ping" wait_for 15 http_ok http://127.0.0.1:4151/ping
check "admin-ui answers /ping" wait_for 15 http_ok http://127.0.0.1:4171/ping
# The topic and the consumers' channels exist before the first publish.
inside curl -fsS -o /dev/null -X POST 'http://127.0.0.1:4151/topic/create?topic=events' || true
inside systemctl start nsq_to_file@events.service nsq_to_nsq@events.service nsq_to_http@events.service
check "the three tools subscribed (a client on each channel)" wait_for 15 \
  stats events 'all(len(c["clients"]) == 1 for c in T["channels"]) and len(T["channels"]) == 3'
for u in "${UNITS[@]}"; do
  check "$u active" active "$u"
done
# The sandbox as the kernel sees it: a seccomp filter, no new privileges, no capabilities; and
# io_uring rings open (every binary but admin-ui's).
sandboxed() { # unit
  local pid seen
  pid="$(prop "$1" MainPID)"
  seen="$(inside grep -E '^(Seccomp|NoNewPrivs|CapBnd|CapEff):' "/proc/$pid/status" | tr -s '\t\n' '  ')"
  [ "$seen" = "CapEff: 0000000000000000 CapBnd: 0000000000000000 NoNewPrivs: 1 Seccomp: 2 " ] ||
    { echo "     /proc/$pid/status: $seen"; return 1; }
}
rings() { # unit
  inside sh -c "ls -l /proc/$(prop "$1" MainPID)/fd | grep -c 'io_uring'"
}
for u in "${UNITS[@]}"; do
  check "$u: seccomp filter, NoNewPrivs, no capabilities" sandboxed "$u"
  if [ "$u" = admin-ui.service ]; then continue; fi
  check "$u: io_uring rings open ($(rings "$u"))" test "$(rings "$u")" -gt 0
done

# ---- 2. messages through every process -------------------------------------------------------
seq 1 "$N" | inside curl -fsS -o /dev/null --data-binary @- 'http://127.0.0.1:4151/mpub?topic=events' || true
posted() { [ "$(inside sh -c 'wc -l < /run/http-sink.log' 2>/dev/null || echo 0)" -ge "$N" ]; }
check "nsq_to_nsq copied $N messages to events-copy" wait_for 20 \
  stats events-copy "T['message_count'] == $N"
check "nsq_to_http POSTed $N messages" wait_for 20 posted
check "every channel of events finished all $N" wait_for 20 \
  stats events "all(c['message_count'] == $N and c['depth'] == 0 and c['in_flight_count'] == 0 for c in T['channels'])"
check "the lookup knows the broker's topic" wait_for 10 \
  inside sh -c "curl -fsS 'http://127.0.0.1:4161/lookup?topic=events' | grep -q '\"tcp_port\":4150'"
check "admin-ui lists the broker" \
  inside sh -c "curl -fsS http://127.0.0.1:4171/api/nodes | grep -q '127.0.0.1'"
for u in "${UNITS[@]}"; do
  check "$u still active after the messages" active "$u"
done

if [ -n "$DEB" ]; then
  # ---- 3. upgrade, remove, purge -------------------------------------------------------------
  # Enabled as an operator would: purge must take the links away.
  inside systemctl enable --quiet lookup.service broker.service admin-ui.service
  declare -A PIDS=()
  for u in "${UNITS[@]}"; do PIDS[$u]="$(prop "$u" MainPID)"; done
  inside sh -c 'DEBIAN_FRONTEND=noninteractive dpkg -i /root/package.deb' > "$WORK/dpkg.log" 2>&1 ||
    { cat "$WORK/dpkg.log"; fail "dpkg -i (upgrade) failed"; }
  check "the upgrade kept the edited settings" \
    inside grep -q '^BROKER_BROADCAST_ADDRESS=127.0.0.1$' /etc/default/broker
  restarted() { [ "$(prop "$1" MainPID)" != "$2" ] && active "$1"; }
  for u in "${UNITS[@]}"; do
    check "the upgrade restarted $u" wait_for 15 restarted "$u" "${PIDS[$u]}"
  done
  check "the broker serves again after the upgrade" wait_for 15 http_ok http://127.0.0.1:4151/ping
  inside dpkg -r nsq-broker > "$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log"; fail "dpkg -r failed"; }
  for u in "${UNITS[@]}"; do
    check "remove stopped $u cleanly" test "$(prop "$u" ActiveState)/$(prop "$u" Result)" = "inactive/success"
  done
  check "remove kept the data and the settings" \
    inside test -d /var/lib/broker/events -a -f /etc/default/broker
  inside dpkg -P nsq-broker > "$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log"; fail "dpkg -P failed"; }
  check "purge removed the data, the settings and the enable links" \
    inside sh -c '! ls -d /var/lib/broker /var/lib/nsq_to_file /etc/default/broker /etc/systemd/system/*.wants/lookup.service /etc/systemd/system/*.wants/broker.service 2>/dev/null'
  check "purge kept the nsq user" inside sh -c 'getent passwd nsq >/dev/null'
else
  # ---- 3. clean stop, files, and the properties through systemd-run --------------------------
  inside systemctl stop nsq_to_file@events.service nsq_to_nsq@events.service nsq_to_http@events.service
  inside systemctl stop admin-ui.service broker.service lookup.service
  for u in "${UNITS[@]}"; do
    check "$u stopped cleanly (Result=success, status 0, no restart)" test \
      "$(prop "$u" Result)/$(prop "$u" ExecMainStatus)/$(prop "$u" NRestarts)" = "success/0/0"
  done
  archived() {
    inside sh -c 'cat /var/lib/nsq_to_file/events/*.gz | gunzip | wc -l'
  }
  check "nsq_to_file archived $N messages (owner nsq, mode 0640)" test \
    "$(archived)/$(inside sh -c 'stat -c %U:%a /var/lib/nsq_to_file/events/*.gz | sort -u')" = "$N/nsq:640"
  check "the broker's data files are nsq's, not world-readable (UMask=0027)" test \
    "$(inside find /var/lib/broker -mindepth 1 \( ! -user nsq -o -perm /o=rwx \) -print | wc -l)" = 0

  # Every [Service] line but the command and restart policy, as -p, with the template's %i given.
  properties() { # unit file
    sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$1" |
      sed -n '/^\[Service\]/,/^\[/p' | grep -E '^[A-Za-z]+=' |
      grep -vE '^(Type|ExecStart|ExecReload|Restart|RestartSec)=' | sed -e 's/%i/events/g'
  }
  # One binary through systemd-run with its unit's properties: started in the background
  # (--wait: systemd-run prints the result when the unit ends), checked, stopped with SIGTERM.
  run_with_properties() { # unit-file ready-check command...
    local unit="$1" ready="$2" name out props=()
    shift 2
    name="props-$(basename "$unit" .service | tr -d '@')"
    while IFS= read -r p; do props+=(-p "$p"); done < <(properties "$DEPLOY/$unit")
    [ "${#props[@]}" -gt 40 ] || fail "found only ${#props[@]} words of properties in $DEPLOY/$unit"
    out="$WORK/$name.out"
    inside systemd-run --unit="$name" --wait --pipe "${props[@]}" "$@" > "$out" 2>&1 &
    local pid=$!
    # shellcheck disable=SC2086 # the check's words
    check "systemd-run ${#props[@]} properties of $unit: $* is up" wait_for 15 $ready
    inside systemctl stop "$name.service" >/dev/null 2>&1 || true
    wait "$pid" || true
    check "systemd-run $unit: exited 0 on SIGTERM" grep -q 'code=exited/status=0$' "$out"
    grep -q 'code=exited/status=0$' "$out" || cat "$out"
  }
  tcp_open() { inside bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
  run_with_properties lookup.service "tcp_open 4160" /opt/nsq-bin/lookup \
    --tcp-address=127.0.0.1:4160 --http-address=127.0.0.1:4161 --broadcast-address=127.0.0.1
  run_with_properties broker.service "http_ok http://127.0.0.1:4151/ping" /opt/nsq-bin/broker \
    --tcp-address=127.0.0.1:4150 --http-address=127.0.0.1:4151 --data-path=/var/lib/broker \
    --broadcast-address=127.0.0.1
  run_with_properties admin-ui.service "http_ok http://127.0.0.1:4171/ping" /opt/nsq-bin/admin-ui \
    --http-address=127.0.0.1:4171 --lookupd-http-address=127.0.0.1:4161
  # The tools against a broker started by its unit.
  inside systemctl start broker.service
  wait_for 15 http_ok http://127.0.0.1:4151/ping || true
  consumer_of() { stats events "any(c['channel_name'] == '$1' and c['clients'] for c in T['channels'])"; }
  run_with_properties 'nsq_to_file@.service' "consumer_of nsq_to_file" /opt/nsq-bin/nsq_to_file \
    --topic=events --output-dir=/var/lib/nsq_to_file/events --work-dir=/var/lib/nsq_to_file/.work/events \
    --nsqd-tcp-address=127.0.0.1:4150 --channel=nsq_to_file
  run_with_properties 'nsq_to_nsq@.service' "consumer_of nsq_to_nsq" /opt/nsq-bin/nsq_to_nsq \
    --topic=events --nsqd-tcp-address=127.0.0.1:4150 --destination-nsqd-tcp-address=127.0.0.1:4150 \
    --destination-topic=events-copy
  run_with_properties 'nsq_to_http@.service' "consumer_of nsq_to_http" /opt/nsq-bin/nsq_to_http \
    --topic=events --nsqd-tcp-address=127.0.0.1:4150 --post=http://127.0.0.1:8080/events
  inside systemctl stop broker.service
fi

# ---- 4. what the sandbox refused -------------------------------------------------------------
# A system call the filter refused (SIGSYS, EPERM), or a file the sandbox hides or keeps
# read-only (the broker reads /proc/sys/kernel/random/boot_id, writes only its data path).
JOURNAL="$(inside journalctl --no-pager -o cat -u 'lookup*' -u 'broker*' -u 'admin-ui*' -u 'nsq_to_*' -u 'props-*')"
refused="$(grep -iE 'SIGSYS|bad system call|operation not permitted|EPERM|permission denied|read-only file system|cannot read /proc' <<< "$JOURNAL" || true)"
check "nothing refused by the sandbox in the journals" test -z "$refused"
[ -z "$refused" ] || echo "$refused"
echo "warnings and errors logged (none expected but the lookups not yet up):"
grep -E ' (WARN|ERROR) ' <<< "$JOURNAL" | sed -e 's/^[^ ]* *//' | sort | uniq -c | sed -e 's/^/  /' || true

echo
if [ "$FAILURES" -ne 0 ]; then
  echo "units_under_systemd: $FAILURES checks failed; the journal:"
  inside journalctl --no-pager -o short-monotonic -u 'lookup*' -u 'broker*' -u 'admin-ui*' -u 'nsq_to_*' -u 'props-*' | tail -n 40
  exit 1
fi
echo "units_under_systemd: every check passed"
