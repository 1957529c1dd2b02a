#!/usr/bin/env bash
# Builds the Debian package nsq-broker from the release binaries with Debian's own dpkg-deb
# (nothing is compiled: run it after `cargo build --release -p broker -p lookup -p admin-ui
# -p tools`). From the repository root:
#
#   deploy/debian/build-deb.sh [--build-dir DIR] [--out DIR]
#
# writes OUT/nsq-broker_<version>-<revision>_<arch>.deb and prints its path on the last line.
# The package (deploy/README.md, "The Debian package"):
#   /usr/bin/                      broker, lookup, admin-ui and the utilities (stripped)
#   /lib/systemd/system/           the units of deploy/, ExecStart naming /usr/bin (none enabled)
#   /etc/default/                  deploy/*.env, as conffiles
#   /usr/share/doc/nsq-broker/     README.md, ARCHITECTURE.md, docs/, deploy/README.md,
#                                  copyright, changelog.Debian.gz
#   /usr/share/man/man1/           a page per binary, from its --help
#   DEBIAN/postinst, prerm, postrm deploy/debian/'s: the nsq user and group, /var/lib/broker and
#                                  /var/lib/nsq_to_file, systemd; data removed only on purge
#
# Version: the workspace's (Cargo.toml [workspace.package]) and DEB_REVISION (default 1);
# architecture: `dpkg --print-architecture`; Depends: what the binaries link (objdump), with
# the newest glibc and libgcc symbol versions they use, and adduser.
#
# Environment: BUILD_DIR (default target/release), OUT_DIR (default target/debian),
# DEB_COMPRESSION (xz, gzip, zstd or none; default xz), DEB_REVISION, DEBFULLNAME and DEBEMAIL
# (the Maintainer field; default git's user.name and user.email), SOURCE_DATE_EPOCH (the files'
# times and the changelog's date; default the last commit's time, so that a rebuild of the same
# commit gives the same package).
set -euo pipefail

CALLER="$(pwd)"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"

PACKAGE=nsq-broker
BINARIES=(broker lookup admin-ui nsq_to_file nsq_tail to_nsq nsq_stat nsq_to_nsq nsq_to_http)
UNITS=(broker.service lookup.service admin-ui.service nsq_to_file@.service nsq_to_nsq@.service
       nsq_to_http@.service)
SETTINGS=(broker lookup admin-ui nsq_to_file nsq_to_nsq nsq_to_http)
BUILD="${BUILD_DIR:-target/release}"
OUT="${OUT_DIR:-target/debian}"
COMPRESSION="${DEB_COMPRESSION:-xz}"
REVISION="${DEB_REVISION:-1}"

usage() {
  echo "usage: deploy/debian/build-deb.sh [--build-dir DIR] [--out DIR]"
}
fail() {
  echo "build-deb.sh: $*" >&2
  exit 1
}

while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir|--out)
      [ $# -ge 2 ] || { usage >&2; fail "$1 needs a value"; }
      case "$1" in
        --build-dir) BUILD="$2" ;;
        --out) OUT="$2" ;;
      esac
      shift ;;
    --build-dir=*) BUILD="${1#*=}" ;;
    --out=*) OUT="${1#*=}" ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; fail "unknown argument '$1'" ;;
  esac
  shift
done

# Relative paths given are the caller's; the defaults are the repository's.
case "$BUILD" in /*|target/release) ;; *) BUILD="$CALLER/$BUILD" ;; esac
case "$OUT" in /*|target/debian) ;; *) OUT="$CALLER/$OUT" ;; esac

for tool in dpkg dpkg-deb objdump strip gzip; do
  command -v "$tool" >/dev/null 2>&1 || fail "needs $tool (apt-get install dpkg binutils gzip)"
done
case "$COMPRESSION" in
  xz|gzip|zstd|none) ;;
  *) fail "DEB_COMPRESSION '$COMPRESSION': give xz, gzip, zstd or none" ;;
esac
[[ "$REVISION" =~ ^[0-9A-Za-z.+~]+$ ]] || fail "DEB_REVISION '$REVISION': digits, letters and . + ~ only"
for b in "${BINARIES[@]}"; do
  [ -x "$BUILD/$b" ] || fail "no $BUILD/$b: cargo build --release -p broker -p lookup -p admin-ui -p tools (or --build-dir DIR)"
done

# ---- version, architecture, maintainer, time -------------------------------------------------
UPSTREAM="$(awk '
  /^\[/ { section = $0; next }
  section == "[workspace.package]" && $1 == "version" {
    sub(/^[^"]*"/, ""); sub(/".*$/, ""); print; exit
  }' Cargo.toml)"
[[ "$UPSTREAM" =~ ^[0-9][0-9A-Za-z.+-]*$ ]] || fail "no version in Cargo.toml's [workspace.package] (found '$UPSTREAM')"
# Cargo's pre-releases (0.2.0-rc.1) sort before the release; Debian's ~ does the same.
VERSION="${UPSTREAM//-/\~}-$REVISION"
ARCH="$(dpkg --print-architecture)"
COMMIT="$(git rev-parse --short=12 HEAD 2>/dev/null || true)"
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH="$(git log -1 --format=%ct 2>/dev/null || date +%s)"
fi
[[ "$SOURCE_DATE_EPOCH" =~ ^[0-9]+$ ]] || fail "SOURCE_DATE_EPOCH '$SOURCE_DATE_EPOCH' is not a number of seconds"
export SOURCE_DATE_EPOCH
NAME="${DEBFULLNAME:-$(git config user.name 2>/dev/null || true)}"
EMAIL="${DEBEMAIL:-$(git config user.email 2>/dev/null || true)}"
{ [ -n "$NAME" ] && [ -n "$EMAIL" ]; } || fail "no maintainer: set DEBFULLNAME and DEBEMAIL (or git's user.name and user.email)"
MAINTAINER="$NAME <$EMAIL>"

# ---- the tree --------------------------------------------------------------------------------
umask 022
STAGE="$(mktemp -d "${TMPDIR:-/tmp}/build-deb.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
ROOT="$STAGE/$PACKAGE"
DOC="$ROOT/usr/share/doc/$PACKAGE"
install -d -m 0755 "$ROOT/DEBIAN" "$ROOT/usr/bin" "$ROOT/lib/systemd/system" "$ROOT/etc/default" \
  "$DOC/deploy" "$ROOT/usr/share/man/man1" "$ROOT/usr/share/lintian/overrides"

# Binaries, stripped as dh_strip does (the debug info is most of their size).
for b in "${BINARIES[@]}"; do
  install -m 0755 "$BUILD/$b" "$ROOT/usr/bin/$b"
  strip --remove-section=.comment --remove-section=.note "$ROOT/usr/bin/$b"
done

# Units: ExecStart and Documentation name the package's paths; the install instructions at the
# top of deploy/'s copies give way to the package's.
for u in "${UNITS[@]}"; do
  settings="${u%.service}"
  settings="${settings%@}"
  {
    echo "# $u of the $PACKAGE package. Settings: /etc/default/$settings; other changes:"
    echo "# systemctl edit $u (a drop-in that upgrades keep). Guide: /usr/share/doc/$PACKAGE/deploy/README.md"
    awk 'started || !/^#/ { started = 1; print }' "deploy/$u" |
      sed -e 's#/usr/local/bin/#/usr/bin/#g' \
          -e "s#file:///usr/local/share/doc/broker/#file:///usr/share/doc/$PACKAGE/#g"
  } > "$ROOT/lib/systemd/system/$u"
  chmod 0644 "$ROOT/lib/systemd/system/$u"
  ! grep -q /usr/local "$ROOT/lib/systemd/system/$u" || fail "deploy/$u still names /usr/local after the rewrite"
done

for s in "${SETTINGS[@]}"; do
  install -m 0644 "deploy/$s.env" "$ROOT/etc/default/$s"
done

# Documentation: the README, its docs/ and the deploy guide, at the paths the README's links use.
install -m 0644 README.md ARCHITECTURE.md "$DOC/"
cp -R docs "$DOC/docs"
install -m 0644 deploy/README.md "$DOC/deploy/README.md"
find "$DOC" -type d -exec chmod 0755 {} +
find "$DOC" -type f -exec chmod 0644 {} +

# copyright: the project's license, and the crates linked into the binaries with theirs.
CRATES=""
HOST="$(rustc -vV 2>/dev/null | sed -n 's/^host: //p' || true)"
if [ -n "$HOST" ] && CRATES="$(cargo tree --offline --locked -e normal --prefix none -f '{p}: {l}' \
     -p broker -p lookup -p admin-ui -p tools --target "$HOST" 2>/dev/null)"; then
  # "name vX.Y.Z: license", without the workspace's own crates (a path) and repeats (*).
  CRATES="$(grep -v ' (/' <<< "$CRATES" | sed -e 's/ (\*)$//' -e 's/^\([^ ]*\) v/\1 /' | LC_ALL=C sort -u)"
else
  echo "build-deb.sh: warning: cargo tree failed; copyright names Cargo.lock instead of each crate" >&2
  CRATES=""
fi
{
  echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
  echo "Upstream-Name: nsq-shard"
  echo "Comment: The binaries are statically linked with Rust crates, each under the license"
  echo " its authors give; on Debian systems the texts of the Apache-2.0, MPL-2.0 and"
  echo " BSD-3-Clause licenses are in /usr/share/common-licenses/Apache-2.0, MPL-2.0 and BSD."
  if [ -n "$CRATES" ]; then
    echo " The crates:"
    echo " ."
    while IFS= read -r crate; do echo " $crate"; done <<< "$CRATES"
  else
    echo " Cargo.lock in the source names the crates."
  fi
  echo
  sed -e "s/@YEAR@/$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)/" deploy/debian/copyright.in
} > "$DOC/copyright"
chmod 0644 "$DOC/copyright"

{
  echo "$PACKAGE ($VERSION) unstable; urgency=medium"
  echo
  echo "  * Built by deploy/debian/build-deb.sh${COMMIT:+ from commit $COMMIT}."
  echo
  echo " -- $MAINTAINER  $(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n > "$DOC/changelog.Debian.gz"
chmod 0644 "$DOC/changelog.Debian.gz"

# Manual pages from each binary's --help: NAME, SYNOPSIS, DESCRIPTION, then every option as a
# tagged paragraph.
man_page() { # binary
  local help
  help="$("$BUILD/$1" --help 2>&1)" || fail "$BUILD/$1 --help failed (a binary for another architecture?)"
  awk -v name="$1" -v version="$UPSTREAM" -v pkg="$PACKAGE" \
      -v date="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)" '
    function esc(s) {
      gsub(/\\/, "\\e", s); gsub(/-/, "\\-", s)
      if (s ~ /^[.\047]/) s = "\\&" s
      return s
    }
    NR == 1 {
      printf ".TH %s 1 \"%s\" \"%s %s\" \"User Commands\"\n", toupper(esc(name)), date, pkg, version
      # Left-adjusted, unhyphenated: flags and paths stay whole.
      print ".ad l"; print ".nh"
      print ".SH NAME"; printf "%s \\- %s\n", esc(name), esc($0); about = $0; next
    }
    /^Usage: / {
      sub(/^Usage: [^ ]* */, "")
      print ".SH SYNOPSIS"; printf ".B %s\n%s\n", esc(name), esc($0)
      print ".SH DESCRIPTION"; print esc(about) "."
      print esc("The guide: /usr/share/doc/" pkg "/README.md; every flag: /usr/share/doc/" pkg "/docs/flags.md.")
      next
    }
    /^[A-Z][A-Za-z ]*:$/ { sub(/:$/, ""); print ".SH " toupper($0); item = 0; next }
    /^[ \t]*$/ { if (item) gap = 1; next }
    {
      match($0, /^ */); indent = RLENGTH; sub(/^ +/, "")
      if (indent >= 1 && indent <= 6) {
        # A break point before the optional value of a long flag: [=<VALUE>].
        tag = esc($0); gsub(/\[=/, "\\:[=", tag)
        print ".TP"; print ".B " tag; item = 1; gap = 0; next
      }
      if (gap) { print ".IP"; gap = 0 }
      print esc($0)
    }
  ' <<< "$help"
}
for b in "${BINARIES[@]}"; do
  man_page "$b" | gzip -9n > "$ROOT/usr/share/man/man1/$b.1.gz"
  chmod 0644 "$ROOT/usr/share/man/man1/$b.1.gz"
done

install -m 0644 deploy/debian/lintian-overrides "$ROOT/usr/share/lintian/overrides/$PACKAGE"

# Every file dated SOURCE_DATE_EPOCH (dpkg-deb dates the archive's members with it).
find "$ROOT" -exec touch --no-dereference --date="@$SOURCE_DATE_EPOCH" {} +

# ---- DEBIAN/ ---------------------------------------------------------------------------------
# Depends: the package of each library the binaries link, at the newest symbol version used.
declare -A DEPENDS=([adduser]="adduser")
SYMBOLS="$(for b in "${BINARIES[@]}"; do objdump -T "$ROOT/usr/bin/$b"; done | grep -o 'GLIBC_[0-9][0-9.]*\|GCC_[0-9][0-9.]*' | sort -u)"
newest() { # prefix: the newest version of that symbol set the binaries use
  grep "^$1" <<< "$SYMBOLS" | sed "s/^$1//" | sort -V | tail -n 1 || true
}
while read -r lib; do
  case "$lib" in
    libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1|ld-linux*.so.*)
      v="$(newest GLIBC_)"
      DEPENDS[libc6]="libc6${v:+ (>= $v)}" ;;
    libgcc_s.so.1)
      v="$(newest GCC_ | cut -d. -f1,2)"
      DEPENDS[libgcc-s1]="libgcc-s1${v:+ (>= $v)}" ;;
    *) fail "the binaries link $lib: name the Debian package that has it in deploy/debian/build-deb.sh" ;;
  esac
done < <(for b in "${BINARIES[@]}"; do objdump -p "$ROOT/usr/bin/$b" | awk '$1 == "NEEDED" { print $2 }'; done | sort -u)
DEPENDS_FIELD="$(for k in "${!DEPENDS[@]}"; do echo "${DEPENDS[$k]}"; done | LC_ALL=C sort | paste -sd, - | sed 's/,/, /g')"

INSTALLED_SIZE="$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)"
cat > "$ROOT/DEBIAN/control" <<EOF
Package: $PACKAGE
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $INSTALLED_SIZE
Depends: $DEPENDS_FIELD
Conflicts: nsq
Section: net
Priority: optional
Description: NSQ-compatible message broker, one shard per core on io_uring
 A drop-in replacement for NSQ's nsqd (broker), nsqlookupd (lookup) and
 nsqadmin (admin-ui), with NSQ's utilities (nsq_to_file, nsq_tail, to_nsq,
 nsq_stat, nsq_to_nsq, nsq_to_http). NSQ clients and tools talk to it
 unchanged: the TCP protocol, the HTTP API, the flags and the config file are
 nsqd 1.3's.
 .
 The package holds the binaries, hardened systemd units (none enabled on
 installation) and their settings in /etc/default/, and makes the nsq system
 user. It conflicts with packages named nsq: they ship NSQ's own utilities
 under the same names.
EOF
(cd "$ROOT" && find etc -type f | LC_ALL=C sort | sed 's#^#/#') > "$ROOT/DEBIAN/conffiles"
for script in postinst prerm postrm; do
  install -m 0755 "deploy/debian/$script" "$ROOT/DEBIAN/$script"
done
(cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -print0 | LC_ALL=C sort -z |
  xargs -0 md5sum | sed 's#  \./#  #') > "$ROOT/DEBIAN/md5sums"
chmod 0644 "$ROOT/DEBIAN/control" "$ROOT/DEBIAN/conffiles" "$ROOT/DEBIAN/md5sums"
find "$ROOT/DEBIAN" -exec touch --no-dereference --date="@$SOURCE_DATE_EPOCH" {} +

# ---- the package -----------------------------------------------------------------------------
mkdir -p "$OUT"
DEB="$(cd "$OUT" && pwd)/${PACKAGE}_${VERSION}_${ARCH}.deb"
dpkg-deb --root-owner-group -Z"$COMPRESSION" --build "$ROOT" "$DEB" >/dev/null
echo "$DEB"
