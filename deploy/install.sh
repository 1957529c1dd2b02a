#!/usr/bin/env bash
# Installs the broker, lookup and admin-ui binaries, NSQ's utilities (nsq_to_file, nsq_tail,
# to_nsq, nsq_stat, nsq_to_nsq, nsq_to_http) and their systemd units on this host. Run from the
# repository root after `cargo build --release -p broker -p lookup -p admin-ui -p tools`, as root.
# On Debian and its derivatives the package does the same (deploy/debian/build-deb.sh).
#
#   deploy/install.sh                 the install above: binaries in PREFIX/bin, units in
#                                     /etc/systemd/system, settings in /etc/default (an existing
#                                     settings file is kept), docs in PREFIX/share/doc/broker, and
#                                     a manifest of it all in PREFIX/share/nsq-broker/install-manifest
#   deploy/install.sh --uninstall     removes what the manifest lists (stopping and disabling the
#                                     units first), except files changed since: settings edited
#                                     by hand, a binary replaced by another; never the data in
#                                     /var/lib or the nsq user
#   deploy/install.sh --from-nsqd [--nsqd-config FILE|none] [--nsqd-data DIR] [--nsqd-unit UNIT]
#                                     the install, then the broker takes over this host's nsqd: its
#                                     unit is stopped and disabled, the broker's unit gets nsqd's
#                                     command line, config file and data path (a drop-in), the
#                                     data path goes to the nsq user, `broker import-nsqd
#                                     --dry-run` shows what the broker will import, and the
#                                     broker starts (deploy/README.md, "Taking over an nsqd host")
#
# Options:
#   --prefix DIR       where binaries and docs go (default /usr/local); the units name PREFIX/bin
#   --no-systemd       no units and no systemctl (another supervisor runs the binaries); without
#                      it the units are installed, and systemctl is only used when systemd runs
#   --replace-nsq      overwrite files this script did not install (NSQ's own nsq_tail, ... in
#                      PREFIX/bin): without it the install refuses and changes nothing. A file
#                      replaced is kept under PREFIX/share/nsq-broker/replaced/ and put back by
#                      --uninstall
#
# DESTDIR=DIR writes every file under DIR, needs no root and creates no user (the commands it
# runs, systemctl, chown and the dry run, still run: tests/python/test_deploy_install.py and
# tests/deploy/test_install_sh.py put stand-ins first on PATH); BUILD_DIR (default
# target/release) is where the binaries are taken from.
set -euo pipefail
cd "$(dirname "$0")/.."

D="${DESTDIR:-}"
B="${BUILD_DIR:-target/release}"
PREFIX=/usr/local
UNINSTALL=0
NO_SYSTEMD=0
REPLACE_NSQ=0
FROM_NSQD=0
NSQD_CONFIG=""
NSQD_DATA=""
NSQD_UNIT="nsqd.service"
DROPIN=/etc/systemd/system/broker.service.d/nsqd.conf
BINARIES=(broker lookup admin-ui nsq_to_file nsq_tail to_nsq nsq_stat nsq_to_nsq nsq_to_http)
UNITS=(broker.service lookup.service admin-ui.service nsq_to_file@.service nsq_to_nsq@.service
       nsq_to_http@.service)
SETTINGS=(broker lookup admin-ui nsq_to_file nsq_to_nsq nsq_to_http)

usage() {
  echo "usage: deploy/install.sh [--prefix DIR] [--no-systemd] [--replace-nsq]"
  echo "                         [--from-nsqd [--nsqd-config FILE|none] [--nsqd-data DIR] [--nsqd-unit UNIT]]"
  echo "       deploy/install.sh --uninstall [--prefix DIR] [--no-systemd]"
  echo "(DESTDIR=DIR installs under DIR; BUILD_DIR=DIR takes the binaries from DIR, default target/release)"
}
fail() {
  echo "install.sh: $*" >&2
  exit 1
}

while [ $# -gt 0 ]; do
  case "$1" in
    --from-nsqd) FROM_NSQD=1 ;;
    --uninstall) UNINSTALL=1 ;;
    --no-systemd) NO_SYSTEMD=1 ;;
    --replace-nsq) REPLACE_NSQ=1 ;;
    --prefix|--nsqd-config|--nsqd-data|--nsqd-unit)
      [ $# -ge 2 ] || { usage >&2; fail "$1 needs a value"; }
      case "$1" in
        --prefix) PREFIX="$2" ;;
        --nsqd-config) NSQD_CONFIG="$2" ;;
        --nsqd-data) NSQD_DATA="$2" ;;
        --nsqd-unit) NSQD_UNIT="$2" ;;
      esac
      shift ;;
    --prefix=*) PREFIX="${1#*=}" ;;
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
if [ "$UNINSTALL" = 1 ] && { [ "$FROM_NSQD" = 1 ] || [ "$REPLACE_NSQ" = 1 ]; }; then
  usage >&2
  fail "--uninstall takes only --prefix and --no-systemd"
fi
if [ "$FROM_NSQD" = 1 ] && [ "$NO_SYSTEMD" = 1 ]; then
  usage >&2
  fail "--from-nsqd runs the broker in nsqd's place through systemd: it cannot go with --no-systemd"
fi

# A path systemd takes as it is in ExecStart= (no spaces, `$` or `%` to expand).
plain_path() {
  [[ "$1" =~ ^/[A-Za-z0-9._@+/-]+$ ]]
}

PREFIX="${PREFIX%/}"
plain_path "$PREFIX" || fail "--prefix '$PREFIX': give an absolute path without spaces, \$ or %"
BIN="$PREFIX/bin"
DOCDIR="$PREFIX/share/doc/broker"
STATE="$PREFIX/share/nsq-broker"
MANIFEST="$STATE/install-manifest"
if [ -n "$D" ]; then
  case "$D" in
    /*) ;;
    *) D="$(pwd)/$D" ;;
  esac
  D="${D%/}"
fi

# Root writes the system's directories and creates the nsq user; DESTDIR needs neither.
if [ -z "$D" ] && [ "$(id -u)" != 0 ]; then
  fail "run as root (sudo deploy/install.sh ...): it writes $BIN, /etc and creates the nsq user; or set DESTDIR=dir to install into a directory"
fi

# systemd is used when it runs (a manager answers systemctl); --no-systemd never asks. Known
# only when the install needs it, after the checks below that change nothing.
SYSTEMD=""
systemd_runs() {
  if [ -z "$SYSTEMD" ]; then
    SYSTEMD=0
    if [ "$NO_SYSTEMD" = 0 ] && command -v systemctl >/dev/null 2>&1 &&
       systemctl show-environment >/dev/null 2>&1; then
      SYSTEMD=1
    fi
  fi
  [ "$SYSTEMD" = 1 ]
}

# ---- taking over nsqd: what it ran with, found before anything is installed or stopped --------
NSQD_ARGS=()       # nsqd's command line after the binary, as its unit has it
NSQD_ENV_LINES=""  # its unit's Environment= and EnvironmentFile= lines
NSQD_UNIT_FOUND=0

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

# ---- the manifest ----------------------------------------------------------------------------
# What an earlier run installed, one line each (paths as on the host, without DESTDIR):
#   file SHA256 PATH   a binary, unit or doc (each install overwrites it)
#   conf SHA256 PATH   a settings file in /etc/default (installed once, never overwritten)
#   dir - PATH         a directory this script made
#   saved - PATH       someone else's file that --replace-nsq replaced, kept under $STATE/replaced
declare -A OWNED=()   # path -> "kind sha256"
OLD_DIRS=()
OLD_SAVED=()
if [ -f "$D$MANIFEST" ]; then
  while read -r kind sum path; do
    case "$kind" in
      file|conf) OWNED["$path"]="$kind $sum" ;;
      dir) OLD_DIRS+=("$path") ;;
      saved) OLD_SAVED+=("$path") ;;
    esac
  done < <(grep -v '^#' "$D$MANIFEST" || true)
fi
sha256() { sha256sum "$1" | cut -d' ' -f1; }

# ---- uninstall -------------------------------------------------------------------------------
if [ "$UNINSTALL" = 1 ]; then
  [ -f "$D$MANIFEST" ] || fail "no manifest $D$MANIFEST: install.sh installed nothing with --prefix $PREFIX${D:+ under DESTDIR $D}"
  [ ! -e "$D$DROPIN" ] || fail "the broker runs on nsqd's data ($DROPIN): roll back to nsqd first (the drop-in's comments say how: systemctl cat broker), then --uninstall"
  if systemd_runs; then
    # The units go with their enable links and instances (nsq_to_file@<topic>, ...).
    stop=()
    for u in "${UNITS[@]}"; do
      [ -n "${OWNED[/etc/systemd/system/$u]:-}" ] || continue
      case "$u" in
        *@.service)
          stop+=("${u%@.service}@*.service")
          if [ -d "$D/etc/systemd/system" ]; then
            while read -r link; do
              stop+=("$(basename "$link")")
            done < <(find "$D/etc/systemd/system" -mindepth 2 -maxdepth 2 -type l -lname "*/$u" | LC_ALL=C sort -u)
          fi ;;
        *) stop+=("$u") ;;
      esac
    done
    if [ "${#stop[@]}" -gt 0 ]; then
      systemctl stop -- "${stop[@]}" || echo "install.sh: warning: systemctl stop ${stop[*]} failed" >&2
      enabled=()
      for u in "${stop[@]}"; do
        case "$u" in *\**) ;; *) enabled+=("$u") ;; esac
      done
      systemctl disable -- "${enabled[@]}" >/dev/null 2>&1 || true
    fi
  fi
  removed=0
  kept=()
  for path in "${!OWNED[@]}"; do
    f="$D$path"
    [ -e "$f" ] || [ -L "$f" ] || continue
    if [ -L "$f" ] || [ ! -f "$f" ] || [ "$(sha256 "$f")" != "${OWNED[$path]#* }" ]; then
      kept+=("$path")
      continue
    fi
    rm -f "$f"
    removed=$((removed + 1))
  done
  restored=()
  for path in "${OLD_SAVED[@]}"; do
    [ -e "$D$STATE/replaced$path" ] || continue
    if [ ! -e "$D$path" ] && [ ! -L "$D$path" ]; then
      mv "$D$STATE/replaced$path" "$D$path"
      restored+=("$path")
    else
      # Something else is there now (kept above): the original waits where it is.
      kept+=("$STATE/replaced$path (the original of $path)")
    fi
  done
  rm -f "$D$MANIFEST"
  # Deepest first; a directory that holds something else stays.
  while read -r dir; do
    [ -n "$dir" ] || continue
    rmdir "$D$dir" 2>/dev/null || true
  done < <(printf '%s\n' "${OLD_DIRS[@]}" | LC_ALL=C sort -r)
  if systemd_runs; then
    systemctl daemon-reload
  fi
  echo "uninstalled: $removed files removed${restored[*]:+; put back: ${restored[*]}}"
  if [ "${#kept[@]}" -gt 0 ]; then
    echo "kept, changed since the install (settings edited, a file replaced):"
    printf '  %s\n' "${kept[@]}" | LC_ALL=C sort
  fi
  echo "kept: the nsq user, and the data in /var/lib/broker and /var/lib/nsq_to_file"
  exit 0
fi

# ---- what the install writes, checked before anything changes --------------------------------
# Every file, as "kind|mode|source|destination"; the units name PREFIX's binaries and docs.
WORK="$(mktemp -d "${TMPDIR:-/tmp}/install-sh.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
PLAN=()
for b in "${BINARIES[@]}"; do
  [ -f "$B/$b" ] || fail "no $B/$b: build first (cargo build --release -p broker -p lookup -p admin-ui -p tools), or set BUILD_DIR=dir"
  PLAN+=("file|0755|$B/$b|$BIN/$b")
done
if [ "$NO_SYSTEMD" = 0 ]; then
  for u in "${UNITS[@]}"; do
    sed -e "s#/usr/local/bin/#$BIN/#g" -e "s#/usr/local/share/doc/broker/#$DOCDIR/#g" "deploy/$u" > "$WORK/$u"
    PLAN+=("file|0644|$WORK/$u|/etc/systemd/system/$u")
  done
fi
for s in "${SETTINGS[@]}"; do
  PLAN+=("conf|0644|deploy/$s.env|/etc/default/$s")
done
PLAN+=("file|0644|README.md|$DOCDIR/README.md" "file|0644|ARCHITECTURE.md|$DOCDIR/ARCHITECTURE.md")
# The README's links point into docs/ (flags, configuration, TLS and AUTH, ...).
while read -r f; do
  PLAN+=("file|0644|$f|$DOCDIR/$f")
done < <(find docs -type f | LC_ALL=C sort)
# Both are README.md: the deploy guide gets its own name rather than overwriting the first.
PLAN+=("file|0644|deploy/README.md|$DOCDIR/DEPLOY.md")

# A file in the way that this script did not install (NSQ's own nsq_tail, ...) is not
# overwritten without --replace-nsq; the same content is no conflict. Settings files are never
# overwritten at all.
FOREIGN=()
for entry in "${PLAN[@]}"; do
  IFS='|' read -r kind mode src dst <<< "$entry"
  f="$D$dst"
  [ -e "$f" ] || [ -L "$f" ] || continue
  [ "$kind" != conf ] || continue
  [ -z "${OWNED[$dst]:-}" ] || continue
  if [ ! -L "$f" ] && [ -f "$f" ] && cmp -s "$src" "$f"; then continue; fi
  FOREIGN+=("$dst")
done
if [ "${#FOREIGN[@]}" -gt 0 ] && [ "$REPLACE_NSQ" = 0 ]; then
  {
    echo "install.sh: refusing to overwrite files that install.sh did not install (NSQ's own utilities have the same names):"
    printf '  %s\n' "${FOREIGN[@]}"
    echo "nothing was changed. --replace-nsq overwrites them (each is kept under $STATE/replaced/ and put back by --uninstall); --prefix DIR installs elsewhere"
  } >&2
  exit 1
fi
if [ "$FROM_NSQD" = 1 ] && ! systemd_runs; then
  fail "--from-nsqd needs systemd running (systemctl show-environment fails here): nothing was changed"
fi

# ---- the install -----------------------------------------------------------------------------
DIRS=()
# Makes each missing directory of PATH (on the host), recording it for --uninstall.
ensure_dir() {
  local p="" part parts
  IFS=/ read -ra parts <<< "${1#/}"
  for part in "${parts[@]}"; do
    [ -n "$part" ] || continue
    p="$p/$part"
    if [ ! -d "$D$p" ]; then
      install -d -m 0755 "$D$p"
      DIRS+=("$p")
    fi
  done
}

if [ -z "$D" ]; then
  id nsq >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin nsq
fi
RECORDS=()
SAVED=()
for entry in "${PLAN[@]}"; do
  IFS='|' read -r kind mode src dst <<< "$entry"
  f="$D$dst"
  if [ "$kind" = conf ] && { [ -e "$f" ] || [ -L "$f" ]; }; then
    # Kept as it is: the operator's settings (recorded only if this script installed it).
    [ -z "${OWNED[$dst]:-}" ] || RECORDS+=("${OWNED[$dst]%% *} ${OWNED[$dst]#* } $dst")
    continue
  fi
  for foreign in "${FOREIGN[@]}"; do
    if [ "$foreign" = "$dst" ]; then
      ensure_dir "$(dirname "$STATE/replaced$dst")"
      mv -f "$f" "$D$STATE/replaced$dst"
      SAVED+=("$dst")
      echo "replaced $dst (kept as $STATE/replaced$dst)"
    fi
  done
  ensure_dir "$(dirname "$dst")"
  install -m "$mode" "$src" "$f"
  RECORDS+=("$kind $(sha256 "$f") $dst")
done
# Lines of an earlier install this one did not write again (a doc gone since, units before
# --no-systemd) stay, so that --uninstall still finds them.
for path in "${!OWNED[@]}"; do
  found=0
  for entry in "${PLAN[@]}"; do
    [ "${entry##*|}" != "$path" ] || { found=1; break; }
  done
  [ "$found" = 1 ] || RECORDS+=("${OWNED[$path]%% *} ${OWNED[$path]#* } $path")
done
ensure_dir "$STATE"
{
  echo "# Written by deploy/install.sh: what it installed; deploy/install.sh --uninstall removes it."
  echo "# file/conf SHA256 PATH (conf: settings, never overwritten), dir - PATH (made by install.sh),"
  echo "# saved - PATH (a file replaced by --replace-nsq, kept under $STATE/replaced)."
  printf '%s\n' "${RECORDS[@]}" | LC_ALL=C sort -k3
  printf 'dir - %s\n' "${OLD_DIRS[@]}" "${DIRS[@]}" | { grep -v '^dir - $' || true; } | LC_ALL=C sort -u
  printf 'saved - %s\n' "${OLD_SAVED[@]}" "${SAVED[@]}" | { grep -v '^saved - $' || true; } | LC_ALL=C sort -u
} > "$D$MANIFEST.new"
mv -f "$D$MANIFEST.new" "$D$MANIFEST"
chmod 0644 "$D$MANIFEST"
if systemd_runs; then
  systemctl daemon-reload
fi

if [ "$FROM_NSQD" = 0 ]; then
  if [ "$NO_SYSTEMD" = 1 ]; then
    echo "installed in $BIN without units; run lookup, broker and admin-ui with your supervisor: their"
    echo "command lines are the ExecStart lines of deploy/*.service, their settings in /etc/default/"
  else
    systemd_runs || echo "systemd does not run here: the units in /etc/systemd/system take effect when it does"
    echo "installed; edit /etc/default/broker, /etc/default/lookup and /etc/default/admin-ui, then:"
    echo "  systemctl enable --now lookup broker admin-ui"
    echo "and to archive a topic (settings in /etc/default/nsq_to_file):"
    echo "  systemctl enable --now nsq_to_file@<topic>"
    echo "to forward a topic to other brokers or to HTTP endpoints (settings in /etc/default/nsq_to_nsq,"
    echo "/etc/default/nsq_to_http):  systemctl enable --now nsq_to_nsq@<topic>  (or nsq_to_http@<topic>)"
  fi
  prefix_arg=""
  [ "$PREFIX" = /usr/local ] || prefix_arg=" --prefix $PREFIX"
  echo "the manifest: $MANIFEST (deploy/install.sh --uninstall$prefix_arg removes what it lists)"
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
  if ! "$D$BIN/broker" import-nsqd --data-path "$D$NSQD_DATA" --dry-run; then
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
START="$BIN/broker"
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
  echo "# ($DOCDIR/docs/migrating-from-nsqd.md). To roll back to nsqd:"
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
