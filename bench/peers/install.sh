#!/bin/sh
# Installs the peers bench/peers compares vak with, at pinned versions:
# bubblewrap and firejail from Debian, Codex's CLI and Anthropic's
# sandbox-runtime from npm (into $VAK_PEERS, default /opt/vak-peers, which
# is where bench/peers looks first), and what srt needs (ripgrep, socat).
# Run as root (apt); the npm part alone also works as a user with a
# writable $VAK_PEERS.
#
#	bench/peers/install.sh && go run ./bench/peers
set -eu

CODEX_VERSION=0.171.0
SRT_VERSION=0.0.83
prefix=${VAK_PEERS:-/opt/vak-peers}

if [ "$(id -u)" = 0 ]; then
	missing=
	for p in bubblewrap:bwrap firejail:firejail ripgrep:rg socat:socat; do
		command -v "${p#*:}" >/dev/null 2>&1 || missing="$missing ${p%%:*}"
	done
	if [ -n "$missing" ]; then
		echo "apt-get install$missing"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
	fi
else
	echo "not root: skipping the Debian packages (bubblewrap firejail ripgrep socat)" >&2
fi

mkdir -p "$prefix"
echo "npm install --prefix $prefix @openai/codex@$CODEX_VERSION @anthropic-ai/sandbox-runtime@$SRT_VERSION"
# sandbox-runtime asks for Node.js 22 in its engines field; it runs on 20
# (the bench's success-rate column shows whether it did).
npm install --no-audit --no-fund --loglevel=error --prefix "$prefix" \
	"@openai/codex@$CODEX_VERSION" "@anthropic-ai/sandbox-runtime@$SRT_VERSION"
"$prefix/node_modules/.bin/codex" --version
"$prefix/node_modules/.bin/srt" --version
