#!/usr/bin/env python3
"""Runs Weir's equivalents of the Gateway API conformance cases and writes a ConformanceReport.

Weir has no Kubernetes cluster in CI, so it does not run the upstream suite itself: its tests
(tests/gateway_api.rs against the real binary, tests/gateway_controller.rs against a test API
server, the translator's unit tests) reproduce the upstream cases, and tests/conformance/cases.tsv
says which test reproduces which case and how completely. This script runs those tests with
cargo-nextest, reads their JUnit results and writes the report in the upstream format
(apiVersion gateway.networking.k8s.io/v1, kind ConformanceReport), per profile:

- Passed: a case whose equivalent is complete (`full`) and whose tests passed;
- Failed: a case one of whose tests failed;
- Skipped: a case of a feature Weir does not claim, or without a complete equivalent yet
  (listed under `skippedTests`, so the report never counts what was not checked).

Usage: scripts/conformance-report.py [--out FILE] [--junit FILE]
  --junit FILE   read an earlier run's JUnit file instead of running the tests.
"""

import argparse
import datetime
import pathlib
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "conformance" / "cases.tsv"
FEATURES_RS = ROOT / "controller" / "src" / "translate" / "gateway" / "mod.rs"
JUNIT = ROOT / "target" / "nextest" / "conformance" / "junit.xml"
FILTER = (
    "binary(gateway_api) | binary(gateway_controller) | "
    "(package(weir-controller) & test(/translate::gateway::/))"
)
GATEWAY_API_VERSION = "v1.6.0"

# name, route kind of the profile's core
PROFILES = [("GATEWAY-HTTP", "HTTPRoute"), ("GATEWAY-GRPC", "GRPCRoute"), ("GATEWAY-TLS", "TLSRoute")]
ROUTE_KINDS = {"HTTPRoute", "GRPCRoute", "TLSRoute"}
CORE = {"Gateway", "ReferenceGrant"}


def read_cases():
    cases = []
    for line in CASES.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t")
        name, features, coverage, tests = cols[:4]
        provisional = len(cols) > 4 and cols[4] == "provisional"
        tests = [] if tests == "-" else tests.split(",")
        cases.append((name, set(features.split()), coverage, tests, provisional))
    return cases


def supported_features():
    text = FEATURES_RS.read_text()
    block = text[text.index("pub const SUPPORTED_FEATURES"):]
    block = block[: block.index("];")]
    return set(re.findall(r'"([A-Za-z0-9]+)"', block))


def run_tests():
    cmd = ["cargo", "nextest", "run", "--workspace", "--profile", "conformance", "--no-fail-fast", "-E", FILTER]
    print("+", " ".join(cmd), file=sys.stderr)
    # A failing test is a result to report, not a reason to stop.
    subprocess.run(cmd, cwd=ROOT, check=False)
    if not JUNIT.exists():
        sys.exit(f"no JUnit results at {JUNIT}: did the build fail?")
    return JUNIT


def read_results(junit):
    """{(binary, test name): passed}."""
    results = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        failed = any(child.tag in ("failure", "error") for child in case)
        results[(case.get("classname"), case.get("name"))] = not failed
    return results


def outcome(tests, results):
    """True (all passed), False (one failed) or None (one did not run)."""
    seen = []
    for t in tests:
        kind, fn = t.split("::", 1)
        if kind == "unit":
            found = [ok for (b, n), ok in results.items() if b == "weir-controller" and n.endswith("::" + fn)]
        else:
            found = [ok for (b, n), ok in results.items() if b == f"weir::{kind}" and n == fn]
        if not found:
            return None
        seen.extend(found)
    return all(seen)


def profile_cases(cases, kind):
    """The cases a profile runs: those of its route kind, and the Gateway-only ones."""
    out = []
    for c in cases:
        kinds = c[1] & ROUTE_KINDS
        if kind in kinds or not kinds:
            out.append(c)
    return out


def report(cases, results, supported, version):
    lines = [
        "apiVersion: gateway.networking.k8s.io/v1",
        f'date: "{datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}"',
        "gatewayAPIChannel: standard",
        f"gatewayAPIVersion: {GATEWAY_API_VERSION}",
        "implementation:",
        "  contact:",
        "  - https://weir.dev",
        "  organization: weir.dev",
        "  project: weir",
        "  url: https://weir.dev",
        f"  version: {version}",
        "kind: ConformanceReport",
        "mode: default",
        "profiles:",
    ]
    provisional_ok = set()
    for profile, kind in PROFILES:
        core_features = CORE | {kind}
        sections = {}
        for c in profile_cases(cases, kind):
            name, features, coverage, tests, provisional = c
            section = "core" if features <= core_features else "extended"
            stats = sections.setdefault(section, {"Passed": 0, "Failed": 0, "Skipped": 0, "skipped": [], "failed": []})
            ok = outcome(tests, results) if coverage == "full" else None
            if not features <= (supported | core_features) or coverage != "full" or ok is None:
                stats["Skipped"] += 1
                stats["skipped"].append(name)
            elif ok:
                stats["Passed"] += 1
                if provisional:
                    provisional_ok.add(name)
            else:
                stats["Failed"] += 1
                stats["failed"].append(name)
        extended = set()
        for c in profile_cases(cases, kind):
            extended |= c[1] - core_features - ROUTE_KINDS
        summary = []
        first = True
        for section in ("core", "extended"):
            s = sections.get(section)
            if s is None:
                continue
            result = "failure" if s["Failed"] else ("partial" if s["Skipped"] else "success")
            summary.append(f"{section} {result}: {s['Passed']} passed, {s['Failed']} failed, {s['Skipped']} skipped")
            lines.append(("- " if first else "  ") + f"{section}:")
            first = False
            lines.append("    failedTests:" if s["failed"] else "    failedTests: []")
            lines += [f"    - {n}" for n in s["failed"]]
            lines.append(f"    result: {result}")
            lines.append("    skippedTests:" if s["skipped"] else "    skippedTests: []")
            lines += [f"    - {n}" for n in s["skipped"]]
            lines.append("    statistics:")
            for k in ("Failed", "Passed", "Skipped"):
                lines.append(f"      {k}: {s[k]}")
            if section == "extended":
                lines.append("    supportedFeatures:")
                lines += [f"    - {f}" for f in sorted(extended & supported)]
                lines.append("    unsupportedFeatures:")
                lines += [f"    - {f}" for f in sorted(extended - supported)]
        lines.append(f"  name: {profile}")
        lines.append(f"  summary: \"{'; '.join(summary)}\"")
    lines.append("succeededProvisionalTests:" if provisional_ok else "succeededProvisionalTests: []")
    lines += [f"- {n}" for n in sorted(provisional_ok)]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "target" / "conformance" / "report.yaml"))
    ap.add_argument("--junit", help="an earlier run's JUnit file")
    args = ap.parse_args()
    cases = read_cases()
    junit = pathlib.Path(args.junit) if args.junit else run_tests()
    results = read_results(junit)
    version = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M).group(1)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report(cases, results, supported_features(), version))
    print(out)


if __name__ == "__main__":
    main()
