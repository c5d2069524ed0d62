#!/usr/bin/env bash
# Prints the CHANGELOG.md section of VERSION (the lines under `## [VERSION] - DATE`, up to the
# next `## ` heading): the GitHub release's notes. Fails when there is no such section.
#
# Usage: scripts/release-notes.sh VERSION
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: scripts/release-notes.sh VERSION}"
awk -v v="$version" '
  index($0, "## [" v "] - ") == 1 { found = 1; next }
  found && /^## / { exit }
  found && /^\[[^]]+\]: / { exit }
  found { print }
  END { if (!found) { print "release-notes: CHANGELOG.md has no \"## [" v "] - DATE\" section" > "/dev/stderr"; exit 1 } }
' CHANGELOG.md | sed -e '/./,$!d'
