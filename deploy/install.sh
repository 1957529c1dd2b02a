#!/usr/bin/env bash
# Installs the broker, lookup and admin-ui binaries, NSQ's utilities (nsq_to_file, nsq_tail,
# to_nsq, nsq_stat, nsq_to_nsq, nsq_to_http) and their systemd units on this host. Run from the
# repository root after `cargo build --release -p broker -p lookup -p admin-ui -p tools`, as root.
#
#   deploy/install.sh                 the install above
#   deploy/install.sh --from-nsqd [--nsqd-config FILE|none] [--nsqd-data DIR] [--nsqd-unit UNIT]
#                                     the same, then the broker takes over this host's nsqd: its
#                                     unit is stopped and disabled, the broker's unit gets nsqd's
#                                     command line, config file and data path (a drop-in), the
#                                     data path goes to the nsq user, `broker import-nsqd
#                                     --dry-run` shows what the broker will import, and the
#                                     broker starts (deploy/README.md, "Taking over an nsqd host")
#
# DESTDIR=DIR writes every file under DIR (the commands it runs, systemctl, useradd, chown and
# the dry run, still run: tests/python/test_deploy_install.py puts stand-ins first on PATH);
# BUILD_DIR (default target/release) is where the binaries are taken from.
set -euo pipefail
cd "$(dirname "$0")/.."

D="${DESTDIR:-}"
B="${BUILD_DIR:-target/release}"
FROM_NSQD=0
NSQD_CONFIG=""
NSQD_DATA=""
NSQD_UNIT="nsqd.service"
DROPIN=/etc/systemd/system/broker.service.d/nsqd.conf

usage() {
  echo "usage: deploy/install.sh [--from-nsqd [--nsqd-config FILE|none] [--nsqd-data DIR] [--nsqd-unit UNIT]]"
}
fail() {
  echo "install.sh: $*" >&2
  exit 1
}

while [ $# -gt 0 ]; do
  case "$1" in
    --from-nsqd) FROM_NSQD=1 ;;
    --nsqd-config|--nsqd-data|--nsqd-unit)
      [ $# -ge 2 ] || { usage >&2; fail "$1 needs a value"; }
      case "$1" in
        --nsqd-config) NSQD_CONFIG="$2" ;;
        --nsqd-data) NSQD_DATA="$2" ;;
        --nsqd-unit) NSQD_UNIT="$2" ;;
      esac
      shift ;;
    --nsqd-config=*) NSQD_CONFIG="${1#*=}" ;;
    --nsqd-data=*) NSQD_DATA="${1#*=}" ;;
    --nsqd-unit=*) NSQD_UNIT="${1#*=}" ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; fail "unknown argument '$1'" ;;
  esac
  shift
done
if [ "$FROM_NSQD" = 0 ] && { [ -n "$NSQD_CONFIG" ] || [ -n "$NSQD_DATA" ] || [ "$NSQD_UNIT" != nsqd.service ]; }; then
  usage >&2
  fail "--nsqd-config, --nsqd-data and --nsqd-unit go with --from-nsqd"
fi

# ---- taking over nsqd: what it ran with, found before anything is installed or stopped --------
NSQD_ARGS=()       # nsqd's command line after the binary, as its unit has it
NSQD_ENV_LINES=""  # its unit's Environment= and EnvironmentFile= lines
NSQD_UNIT_FOUND=0

# A path systemd takes as it is in ExecStart= (no spaces, `$` or `%` to expand).
plain_path() {
  [[ "$1" =~ ^/[A-Za-z0-9._@+/-]+$ ]]
}

# The `data_path` key of an nsqd config file (TOML: "..." or '...'), or nothing.
config_data_path() {
  sed -n -e "s/^[[:space:]]*data_path[[:space:]]*=[[:space:]]*\"\([^\"]*\)\".*/\1/p" \
    -e "s/^[[:space:]]*data_path[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" "$1" | tail -n 1
}

# Reads nsqd's unit through systemctl (the unit and its drop-ins): the effective ExecStart=
# (continuation lines joined; the last non-empty one, as a drop-in's reset leaves it) and the
# environment lines, which the broker's drop-in repeats so that `$VAR`s in the command line
# keep their values.
read_nsqd_unit() {
  local text exec_line
  systemctl cat -- "$NSQD_UNIT" >/dev/null 2>&1 || return 0
  NSQD_UNIT_FOUND=1
  text="$(systemctl cat -- "$NSQD_UNIT" | sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta')"
  exec_line="$(printf '%s\n' "$text" | sed -n 's/^ExecStart=//p' | grep -v '^[[:space:]]*$' | tail -n 1 || true)"
  NSQD_ENV_LINES="$(printf '%s\n' "$text" | grep -E '^(Environment|EnvironmentFile)=' || true)"
  local words=() skip=1
  read -r -a words <<< "$exec_line"
  # systemd's prefixes on the binary; with `@` the word after it is argv[0], not a flag.
  case "${words[0]:-}" in
    [-+!:]*@*|@*) skip=2 ;;
  esac
  [ "${#words[@]}" -le "$skip" ] || NSQD_ARGS=("${words[@]:$skip}")
  return 0
}

# nsqd's -config / -data-path as its command line gives them (any of Go's flag forms).
flag_value() { # name (without dashes)
  local i w
  for ((i = 0; i < ${#NSQD_ARGS[@]}; i++)); do
    w="${NSQD_ARGS[i]}"
    case "$w" in
      -"$1"=*|--"$1"=*) echo "${w#*=}" ;;
      -"$1"|--"$1") echo "${NSQD_ARGS[i + 1]:-}" ;;
    esac
  done | tail -n 1
}

if [ "$FROM_NSQD" = 1 ]; then
  # A second run would find the broker holding the data path and nsqd's unit disabled.
  [ ! -e "$D$DROPIN" ] || fail "this host already runs the broker on nsqd's data ($DROPIN); without --from-nsqd the install updates binaries and units and keeps it"
  read_nsqd_unit
  # The config file: the flag, else nsqd's command line, else /etc/nsqd.cfg when present.
  if [ -z "$NSQD_CONFIG" ]; then
    NSQD_CONFIG="$(flag_value config)"
    if [ -z "$NSQD_CONFIG" ]; then
      if [ -f "$D/etc/nsqd.cfg" ]; then NSQD_CONFIG=/etc/nsqd.cfg; else NSQD_CONFIG=none; fi
    fi
  fi
  if [ "$NSQD_CONFIG" != none ]; then
    plain_path "$NSQD_CONFIG" || fail "nsqd config file '$NSQD_CONFIG': give an absolute path without spaces, \$ or %"
    [ -f "$D$NSQD_CONFIG" ] || fail "nsqd config file $NSQD_CONFIG does not exist (--nsqd-config FILE, or none)"
  elif [ "$NSQD_UNIT_FOUND" = 0 ]; then
    fail "found neither nsqd's unit $NSQD_UNIT nor /etc/nsqd.cfg: name them (--nsqd-unit UNIT, --nsqd-config FILE), or give --nsqd-config none to run the broker on /etc/default/broker's settings"
  fi
  # The data path: the flag, else nsqd's command line, else the config file, else /var/lib/nsqd.
  if [ -z "$NSQD_DATA" ]; then
    NSQD_DATA="$(flag_value data-path)"
    if [ -z "$NSQD_DATA" ] && [ "$NSQD_CONFIG" != none ]; then
      NSQD_DATA="$(config_data_path "$D$NSQD_CONFIG")"
    fi
    [ -n "$NSQD_DATA" ] || NSQD_DATA=/var/lib/nsqd
  fi
  NSQD_DATA="${NSQD_DATA%/}"
  plain_path "$NSQD_DATA" || fail "nsqd data path '$NSQD_DATA': give an absolute path without spaces, \$ or % (--nsqd-data DIR)"
  [ -d "$D$NSQD_DATA" ] || fail "nsqd data path $NSQD_DATA is not a directory (--nsqd-data DIR)"
  # Without nsqd's command line or config file, the broker runs on /etc/default/broker: it must
  # already hold this host's settings, not the kit's example names.
  if [ "$NSQD_CONFIG" = none ] && [ "${#NSQD_ARGS[@]}" -eq 0 ] && [ ! -f "$D/etc/default/broker" ]; then
    fail "no nsqd config file or command line to take the settings from: write /etc/default/broker first (deploy/broker.env is the template), or give --nsqd-config FILE"
  fi
fi

# ---- the install -----------------------------------------------------------------------------
id nsq >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin nsq
install -D -m 0755 "$B/broker" "$D/usr/local/bin/broker"
install -D -m 0755 "$B/lookup" "$D/usr/local/bin/lookup"
install -D -m 0755 "$B/admin-ui" "$D/usr/local/bin/admin-ui"
for tool in nsq_to_file nsq_tail to_nsq nsq_stat nsq_to_nsq nsq_to_http; do
  install -D -m 0755 "$B/$tool" "$D/usr/local/bin/$tool"
done
install -D -m 0644 deploy/broker.service "$D/etc/systemd/system/broker.service"
install -D -m 0644 deploy/lookup.service "$D/etc/systemd/system/lookup.service"
install -D -m 0644 deploy/admin-ui.service "$D/etc/systemd/system/admin-ui.service"
install -D -m 0644 'deploy/nsq_to_file@.service' "$D/etc/systemd/system/nsq_to_file@.service"
install -D -m 0644 'deploy/nsq_to_nsq@.service' "$D/etc/systemd/system/nsq_to_nsq@.service"
install -D -m 0644 'deploy/nsq_to_http@.service' "$D/etc/systemd/system/nsq_to_http@.service"
[ -f "$D/etc/default/broker" ] || install -D -m 0644 deploy/broker.env "$D/etc/default/broker"
[ -f "$D/etc/default/lookup" ] || install -D -m 0644 deploy/lookup.env "$D/etc/default/lookup"
[ -f "$D/etc/default/admin-ui" ] || install -D -m 0644 deploy/admin-ui.env "$D/etc/default/admin-ui"
[ -f "$D/etc/default/nsq_to_file" ] || install -D -m 0644 deploy/nsq_to_file.env "$D/etc/default/nsq_to_file"
[ -f "$D/etc/default/nsq_to_nsq" ] || install -D -m 0644 deploy/nsq_to_nsq.env "$D/etc/default/nsq_to_nsq"
[ -f "$D/etc/default/nsq_to_http" ] || install -D -m 0644 deploy/nsq_to_http.env "$D/etc/default/nsq_to_http"
install -d -m 0755 "$D/usr/local/share/doc/broker"
install -m 0644 README.md ARCHITECTURE.md "$D/usr/local/share/doc/broker/"
# The README's links point into docs/ (flags, configuration, TLS and AUTH, ...).
cp -R docs "$D/usr/local/share/doc/broker/"
# Both are README.md: the deploy guide gets its own name rather than overwriting the first.
install -m 0644 deploy/README.md "$D/usr/local/share/doc/broker/DEPLOY.md"
systemctl daemon-reload

if [ "$FROM_NSQD" = 0 ]; then
  echo "installed; edit /etc/default/broker, /etc/default/lookup and /etc/default/admin-ui, then:"
  echo "  systemctl enable --now lookup broker admin-ui"
  echo "and to archive a topic (settings in /etc/default/nsq_to_file):"
  echo "  systemctl enable --now nsq_to_file@<topic>"
  echo "to forward a topic to other brokers or to HTTP endpoints (settings in /etc/default/nsq_to_nsq,"
  echo "/etc/default/nsq_to_http):  systemctl enable --now nsq_to_nsq@<topic>  (or nsq_to_http@<topic>)"
  exit 0
fi

# ---- taking over nsqd ------------------------------------------------------------------------
NSQD_WAS_ENABLED=""
if [ "$NSQD_UNIT_FOUND" = 1 ]; then
  NSQD_WAS_ENABLED="$(systemctl is-enabled -- "$NSQD_UNIT" 2>/dev/null || true)"
  # SIGTERM: nsqd writes what it holds in memory, in flight and deferred before it exits.
  echo "stopping $NSQD_UNIT (nsqd writes its memory, in-flight and deferred messages first)"
  systemctl stop -- "$NSQD_UNIT"
  systemctl disable -- "$NSQD_UNIT"
fi

# Puts nsqd back as it was when the broker cannot take over.
restore_nsqd() {
  if [ "$NSQD_UNIT_FOUND" = 1 ]; then
    [ "$NSQD_WAS_ENABLED" != enabled ] || systemctl enable -- "$NSQD_UNIT"
    systemctl start -- "$NSQD_UNIT"
    echo "install.sh: $NSQD_UNIT started again; nothing else changed (the binaries and units are installed)" >&2
  fi
}

# nsqd (and the broker) hold an exclusive flock on their data path while they run.
if ! flock -n "$D$NSQD_DATA" true; then
  echo "install.sh: a process still holds $NSQD_DATA (an nsqd not run by $NSQD_UNIT?): stop it first" >&2
  restore_nsqd
  exit 1
fi

if compgen -G "$D$NSQD_DATA/nsqd*.dat" >/dev/null; then
  echo "what the broker will import (broker import-nsqd --data-path $NSQD_DATA --dry-run):"
  if ! "$D/usr/local/bin/broker" import-nsqd --data-path "$D$NSQD_DATA" --dry-run; then
    echo "install.sh: the dry run refused $NSQD_DATA (above); see docs/migrating-from-nsqd.md" >&2
    restore_nsqd
    exit 1
  fi
else
  echo "no nsqd.dat in $NSQD_DATA: nsqd left nothing to import"
fi

OWNER="$(stat -c '%U:%G' "$D$NSQD_DATA")"
chown -R nsq:nsq "$D$NSQD_DATA"
if [ "$NSQD_CONFIG" != none ]; then
  read -r MODE CFG_OWNER CFG_GROUP < <(stat -c '%a %U %G' "$D$NSQD_CONFIG")
  if [ $((8#$MODE & 4)) = 0 ] && ! { [ "$CFG_GROUP" = nsq ] && [ $((8#$MODE & 040)) != 0 ]; } &&
     ! { [ "$CFG_OWNER" = nsq ] && [ $((8#$MODE & 0400)) != 0 ]; }; then
    echo "warning: the nsq user cannot read $NSQD_CONFIG (mode $MODE, $CFG_OWNER:$CFG_GROUP): chgrp nsq $NSQD_CONFIG && chmod g+r $NSQD_CONFIG" >&2
  fi
fi

# The broker's ExecStart: nsqd's own arguments (the broker takes every nsqd flag in the same
# forms), then the config file and data path found above, then /etc/default/broker's extras.
START="/usr/local/bin/broker"
if [ "${#NSQD_ARGS[@]}" -gt 0 ]; then
  START="$START ${NSQD_ARGS[*]}"
elif [ "$NSQD_CONFIG" = none ]; then
  START="$START --tcp-address=\${BROKER_TCP_ADDRESS} --http-address=\${BROKER_HTTP_ADDRESS} --broadcast-address=\${BROKER_BROADCAST_ADDRESS} \$BROKER_LOOKUPD_FLAGS"
fi
if [ "$NSQD_CONFIG" != none ] && [ "$(flag_value config)" != "$NSQD_CONFIG" ]; then
  START="$START --config=$NSQD_CONFIG"
fi
START="$START --data-path=$NSQD_DATA \$BROKER_EXTRA_FLAGS"

ROLLBACK="#   (first drain the broker, or forward its backlog with nsq_to_nsq: nsqd knows nothing published to it since)
#   systemctl disable --now broker
#   rm $DROPIN && systemctl daemon-reload
#   chown -R $OWNER $NSQD_DATA"
if [ "$NSQD_UNIT_FOUND" = 1 ]; then
  if [ "$NSQD_WAS_ENABLED" = enabled ]; then
    ROLLBACK="$ROLLBACK
#   systemctl enable --now $NSQD_UNIT"
  else
    ROLLBACK="$ROLLBACK
#   systemctl start $NSQD_UNIT"
  fi
else
  ROLLBACK="$ROLLBACK
#   start nsqd as before"
fi
ROLLBACK="$ROLLBACK
#   and before switching forward again, the broker's topic directories and marker out of the way:
#   mkdir $NSQD_DATA.broker && find $NSQD_DATA -mindepth 1 -maxdepth 1 \\( -type d -o -name nsqd-import.json \\) -exec mv -t $NSQD_DATA.broker {} +"

install -d -m 0755 "$D$(dirname "$DROPIN")"
{
  echo "# Written by deploy/install.sh --from-nsqd: the broker takes over $NSQD_UNIT, on nsqd's"
  echo "# command line, config file and data path; it imports nsqd's data at its first start"
  echo "# (/usr/local/share/doc/broker/docs/migrating-from-nsqd.md). To roll back to nsqd:"
  echo "$ROLLBACK"
  echo "[Service]"
  [ -z "$NSQD_ENV_LINES" ] || echo "$NSQD_ENV_LINES"
  echo "ExecStart="
  echo "ExecStart=$START"
  echo "ReadWritePaths=$NSQD_DATA"
} > "$D$DROPIN"
chmod 0644 "$D$DROPIN"

systemctl daemon-reload
systemctl enable broker
systemctl restart broker
echo "the broker runs on $NSQD_DATA (unit: systemctl cat broker; drop-in $DROPIN):"
echo "  ExecStart=$START"
echo "watch: journalctl -u broker (the line 'imported nsqd ...'), curl -s http://127.0.0.1:4151/stats"
echo "lookup and admin-ui are installed, not enabled (nsqlookupd and nsqadmin keep running)."
echo "to roll back to nsqd:"
echo "${ROLLBACK//#   /  }"
