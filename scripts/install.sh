#!/usr/bin/env bash
# The one set-up of a development or CI machine (the README's second command and .ci/run call it):
#   1. the Debian packages the tests' real peers come from, only those whose command is missing:
#      openssl, prometheus, chromium (the Admin UI's browser tests), nodejs (KurrentDB's Node.js
#      client) and python3-venv (so `python3 -m venv` works); `apt-get update` runs once, before the
#      first install. npm is installed only when Node.js is there and brought none of its own
#      (Debian's nodejs package does not; NodeSource's does, and conflicts with Debian's npm).
#   2. a virtual environment (default .venv; first argument to name another), pip upgraded in it;
#   3. the project into it, editable, with its test extra (pyproject.toml).
# Usage: scripts/install.sh [VENV]    from anywhere; as root, or with sudo for the packages.
#        scripts/install.sh --packages-only    step 1 alone.
#        scripts/install.sh --no-tests [VENV]  only what running evdb needs: python3-venv when missing,
#                                              the venv, the project without its test extra.
# It is idempotent: a second run installs nothing new from Debian and leaves the venv as it is, updated.
set -euo pipefail

here="${BASH_SOURCE[0]}"
[[ $here == */* ]] && here="${here%/*}" || here=.
root="$(cd "$here/.." && pwd)"
packages_only=false
tests=true
venv=.venv
if [ "${1:-}" = --no-tests ]; then
  tests=false
  shift
fi
case "${1:-}" in
  --packages-only) packages_only=true ;;
  -h | --help)
    sed -n '2,14p' "${BASH_SOURCE[0]}"
    exit 0
    ;;
  "") ;;
  -*)
    echo "install.sh: unknown option $1 (try --help)" >&2
    exit 2
    ;;
  *) venv="$1" ;;
esac

updated=false
# apt-get as root, or through sudo; says which packages it needs when it can do neither
apt_install() {
  local apt=(apt-get)
  if [ "$EUID" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "install.sh: these Debian packages are missing: $*; run this as root (or install sudo)" >&2
      exit 1
    fi
    apt=(sudo apt-get)
  fi
  if ! $updated; then
    "${apt[@]}" update -qq
    updated=true
  fi
  echo "install.sh: installing $* from Debian's packages"
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq "$@" >/dev/null
  hash -r # the new commands are found from now on
}

missing=()
if $tests; then # the tests' real peers
  command -v openssl >/dev/null || missing+=(openssl)
  command -v prometheus >/dev/null || missing+=(prometheus)
  command -v chromium >/dev/null || missing+=(chromium)
  command -v node >/dev/null || missing+=(nodejs)
fi
# Debian's python3 ships without venv/ensurepip: python3-venv brings them
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  apt_install "${missing[@]}"
fi
# only now is it known whether the Node.js in place brought its own npm
if $tests && ! command -v npm >/dev/null; then
  apt_install npm
fi

if $packages_only; then
  exit 0
fi
cd "$root"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
if $tests; then
  "$venv/bin/pip" install --quiet -e '.[test]'
else
  "$venv/bin/pip" install --quiet -e .
fi
echo "install.sh: the project is installed in $venv ($("$venv/bin/python" --version))"
