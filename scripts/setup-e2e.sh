#!/usr/bin/env bash
# setup-e2e.sh — install what the end-to-end tests (tests/e2e, `npm run test:e2e`) need:
#   * Debian's Chromium (the browser playwright-core drives) and the build inputs of code-server's
#     native modules (libkrb5-dev, g++, make) plus ripgrep (see below), via apt-get;
#   * code-server (a real VS Code) from the npm registry, built here, into a cache OUTSIDE the repo:
#     ${NANLENS_CACHE:-$HOME/.cache/nanlens}/code-server-<version>/node_modules/.bin/code-server
#
# Idempotent and non-interactive: a second run checks and exits in about a second. Runs as root (CI) or
# as a user with passwordless sudo for the apt part. Exits non-zero with one "setup-e2e: error:" line.
#
# Why code-server 4.100.3: it is the newest release whose engines are Node 20 (the machine's Node), so
# no second Node is needed. Its install compiles native modules with gcc; two things must be arranged
# first because the machine reaches only the package registries:
#   * @vscode/ripgrep's postinstall downloads rg from GitHub unless its cache holds the asset; we seed
#     $TMPDIR/vscode-ripgrep-cache-<pkg version>/ripgrep-<rg version>-<target>.tar.gz with Debian's rg;
#   * node-gyp must find Node's headers locally (npm_config_nodedir), or it downloads them.
set -euo pipefail

ORIG_TMPDIR=${TMPDIR:-/tmp}  # the install below points TMPDIR into its work dir
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
# The one place the version is written; tests/e2e/lib/paths.mjs reads the same file.
CODE_SERVER_VERSION=${NANLENS_CODE_SERVER_VERSION:-$(tr -d ' \n' <"$REPO_DIR/tests/e2e/code-server.version")}
CACHE_DIR=${NANLENS_CACHE:-$HOME/.cache/nanlens}
DEST=$CACHE_DIR/code-server-$CODE_SERVER_VERSION
CODE_SERVER_BIN=$DEST/node_modules/.bin/code-server
STAMP=$DEST/.nanlens-installed

log() { echo "setup-e2e: $*"; }
die() { echo "setup-e2e: error: $*" >&2; exit 1; }
now() { date +%s; }
T0=$(now)

# ---------------------------------------------------------------- apt packages
APT_PACKAGES=(chromium ripgrep libkrb5-dev g++ make)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || missing+=("$pkg")
done
if ((${#missing[@]})); then
  SUDO=()
  if [[ $(id -u) != 0 ]]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null || die "need root (or passwordless sudo) to apt-get install ${missing[*]}"
    SUDO=(sudo -n)
  fi
  mkdir -p "$CACHE_DIR"
  APT_LOG=$CACHE_DIR/setup-e2e-apt.log
  log "apt-get update (missing: ${missing[*]}; log: $APT_LOG)"
  "${SUDO[@]}" apt-get update -q >"$APT_LOG" 2>&1 || { tail -n 20 "$APT_LOG" >&2; die "apt-get update failed (see $APT_LOG)"; }
  log "apt-get install -y ${missing[*]}"
  # With Recommends (fonts, mesa): the configuration the e2e suite was verified with.
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >>"$APT_LOG" 2>&1 \
    || { tail -n 20 "$APT_LOG" >&2; die "apt-get install ${missing[*]} failed (see $APT_LOG)"; }
  log "apt packages installed in $(($(now) - T0)) s"
else
  log "apt packages present: ${APT_PACKAGES[*]}"
fi
[[ -x /usr/bin/chromium ]] || die "/usr/bin/chromium missing after installing chromium"
command -v python3 >/dev/null || die "python3 (needed by node-gyp) not found"

# ---------------------------------------------------------------- code-server
# code-server writes a default config and logs under XDG dirs even for --version: keep them out of $HOME.
code_server_runs() {  # $1 = install dir; checks the CLI and the native modules VS Code's server loads
  local dir=$1 xdg ok=0
  xdg=$(mktemp -d "${ORIG_TMPDIR:-/tmp}/nanlens-xdg.XXXXXX") || return 1
  XDG_CONFIG_HOME=$xdg XDG_DATA_HOME=$xdg "$dir/node_modules/.bin/code-server" --version >/dev/null 2>&1 || ok=1
  rm -rf "$xdg"
  local vs=$dir/node_modules/code-server/lib/vscode/node_modules
  for f in node-pty/build/Release/pty.node @vscode/spdlog/build/Release/spdlog.node @vscode/ripgrep/bin/rg; do
    [[ -e $vs/$f ]] || { echo "setup-e2e: missing $vs/$f" >&2; ok=1; }
  done
  return $ok
}

if [[ -f $STAMP ]] && code_server_runs "$DEST" 2>/dev/null; then
  log "code-server $CODE_SERVER_VERSION cached: $CODE_SERVER_BIN"
  log "done in $(($(now) - T0)) s"
  exit 0
fi

command -v node >/dev/null || die "node not found"
command -v npm >/dev/null || die "npm not found"
NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]')
[[ $NODE_MAJOR == 20 ]] || die "code-server $CODE_SERVER_VERSION needs Node 20, found $(node --version)"
NODE_DIR=$(node -p 'require("path").resolve(process.execPath, "../..")')
[[ -f $NODE_DIR/include/node/node.h ]] || die "Node headers not found at $NODE_DIR/include/node (node-gyp would download them)"

mkdir -p "$CACHE_DIR"
WORK=$(mktemp -d "$CACHE_DIR/.code-server-$CODE_SERVER_VERSION.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
LOG=$CACHE_DIR/setup-e2e-code-server.log
: >"$LOG"
log "installing code-server $CODE_SERVER_VERSION into $DEST (log: $LOG; takes several minutes)"

# Private TMPDIR: the ripgrep asset cache lives under it, and nothing is left in /tmp.
export TMPDIR=$WORK/tmp
mkdir -p "$TMPDIR" "$WORK/pack"
export npm_config_unsafe_perm=true   # code-server's postinstall refuses root without it
export npm_config_yes=true           # node-pty's postinstall runs `npx node-gyp`
export npm_config_nodedir=$NODE_DIR  # local headers for node-gyp, no download
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
export JOBS=${JOBS:-2}               # node-gyp's make parallelism

# Seed @vscode/ripgrep's download cache with Debian's rg, for the exact versions code-server pins.
(cd "$WORK/pack" && npm pack --silent "code-server@$CODE_SERVER_VERSION" >>"$LOG" 2>&1) \
  || die "npm pack code-server@$CODE_SERVER_VERSION failed (see $LOG)"
RG_PKG_VERSION=$(tar -xzOf "$WORK/pack/code-server-$CODE_SERVER_VERSION.tgz" package/lib/vscode/npm-shrinkwrap.json \
  | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const p=JSON.parse(s).packages["node_modules/@vscode/ripgrep"];console.log(p?p.version:"")})')
[[ -n $RG_PKG_VERSION ]] || die "cannot find @vscode/ripgrep's version in code-server's shrinkwrap"
(cd "$WORK/pack" && npm pack --silent "@vscode/ripgrep@$RG_PKG_VERSION" >>"$LOG" 2>&1) \
  || die "npm pack @vscode/ripgrep@$RG_PKG_VERSION failed (see $LOG)"
RG_VERSION=$(tar -xzOf "$WORK/pack/vscode-ripgrep-$RG_PKG_VERSION.tgz" package/lib/postinstall.js \
  | sed -n "s/^const VERSION = '\\([^']*\\)'.*/\\1/p")
[[ -n $RG_VERSION ]] || die "cannot read the rg version from @vscode/ripgrep@$RG_PKG_VERSION"
case $(uname -m) in
  x86_64) RG_TARGET=x86_64-unknown-linux-musl ;;
  aarch64) RG_TARGET=aarch64-unknown-linux-musl ;;
  *) die "unsupported architecture $(uname -m)" ;;
esac
RG_CACHE=$TMPDIR/vscode-ripgrep-cache-$RG_PKG_VERSION
mkdir -p "$RG_CACHE" "$WORK/rg"
cp "$(command -v rg)" "$WORK/rg/rg"
tar -czf "$RG_CACHE/ripgrep-$RG_VERSION-$RG_TARGET.tar.gz" -C "$WORK/rg" rg
log "seeded ripgrep cache: @vscode/ripgrep $RG_PKG_VERSION, rg $RG_VERSION <- $(command -v rg)"

T1=$(now)
echo '{"name":"nanlens-code-server","private":true}' >"$WORK/package.json"
if ! (cd "$WORK" && npm install --omit=dev --no-save --no-package-lock --loglevel=warn \
      "$WORK/pack/code-server-$CODE_SERVER_VERSION.tgz" >>"$LOG" 2>&1); then
  tail -n 30 "$LOG" >&2
  die "npm install code-server@$CODE_SERVER_VERSION failed (see $LOG)"
fi
log "npm install took $(($(now) - T1)) s"

rm -rf "$WORK/tmp" "$WORK/pack" "$WORK/rg"
code_server_runs "$WORK" 2>>"$LOG" || die "installed code-server is incomplete or does not run (see $LOG)"
rm -rf "$DEST"
mv "$WORK" "$DEST"
trap - EXIT
code_server_runs "$DEST" || die "code-server does not run after moving it to $DEST"
touch "$STAMP"
log "code-server $CODE_SERVER_VERSION installed: $CODE_SERVER_BIN"
log "done in $(($(now) - T0)) s"
