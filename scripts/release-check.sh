#!/usr/bin/env bash
# Checks that VERSION can be released: it is semver, it is the workspace version in Cargo.toml
# and the chart's appVersion, and CHANGELOG.md has its section with a date. The release
# workflow runs it on the tag before building anything; run it yourself before tagging.
#
# Usage: scripts/release-check.sh VERSION      (VERSION without the tag's "v")
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: scripts/release-check.sh VERSION}"
fail() { echo "release-check: $*" >&2; exit 1; }

semver='^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$'
[[ "$version" =~ $semver ]] || fail "'$version' is not a semantic version (MAJOR.MINOR.PATCH[-PRE])"

cargo_version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
[ "$cargo_version" = "$version" ] \
  || fail "Cargo.toml's [workspace.package] version is '$cargo_version', not '$version'"

app_version="$(sed -n 's/^appVersion: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/weir/Chart.yaml)"
[ "$app_version" = "$version" ] \
  || fail "charts/weir/Chart.yaml's appVersion is '$app_version', not '$version'"

grep -Eq "^## \[$(printf '%s' "$version" | sed 's/[.]/\\./g')\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$" CHANGELOG.md \
  || fail "CHANGELOG.md has no '## [$version] - YYYY-MM-DD' heading (move [Unreleased] to it)"
notes="$(scripts/release-notes.sh "$version")"
[ -n "$notes" ] || fail "CHANGELOG.md's section for $version is empty"
echo "release-check: $version is ready (Cargo.toml, Chart.yaml appVersion, CHANGELOG.md)"
