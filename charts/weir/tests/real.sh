#!/usr/bin/env bash
# Checks the chart on a real (disposable) cluster: charts/weir/tests/real.sh KUBECONFIG
#
# For each mode (all namespaces, then `watchNamespaces`):
#   1. helm install: every object of the release exists, the CRDs are Established;
#   2. runs `weir controller` here, outside the cluster, as the chart's ServiceAccount (a token
#      from `kubectl create token`) with the arguments the chart gave its container, pushing to a
#      `weir proxy` here (also with the chart's arguments, on loopback ports);
#   3. applies an app: a Service with an EndpointSlice (192.0.2.10, TEST-NET-1: nothing is ever
#      sent there), an Ingress, Plugins (one broken), a broken ClusterPlugin, an Upstream, a
#      Consumer with a key-auth credential Secret;
#   4. checks: the route reaches the proxy, /readyz on the status listener, Ingress status (from
#      the chart's Service, whose load-balancer status this script fills in, as no cloud does
#      here), conditions True/False, Warning Events (in the app namespace, and in `default` for
#      the ClusterPlugin), the leader Lease, RBAC refusals (`kubectl auth can-i`), and no
#      `forbidden` in the controller's log; the Lease is released on SIGTERM;
#   5. helm upgrade (a changed value reaches the Deployment), helm uninstall (the release's
#      objects are gone; the CRDs stay).
#
# Needs kubectl, jq, curl, python3, helm (WEIR_HELM, else target/tools/helm from
# scripts/install-helm.sh, else PATH) and a built weir (WEIR_BIN, else target/debug/weir).
# Nothing runs in the cluster (no pod needs to start), so an API server alone is enough.
# The cluster must be disposable: the script creates and deletes namespaces, a ClusterPlugin,
# the IngressClass `weir`, and leaves Weir's CRDs installed.
set -euo pipefail

[ $# -eq 1 ] || { sed -n 2,24p "$0"; exit 2; }
export KUBECONFIG="$1"
root="$(cd "$(dirname "$0")/../../.." && pwd)"
chart="$root/charts/weir"
weir="${WEIR_BIN:-$root/target/debug/weir}"
helm="${WEIR_HELM:-$root/target/tools/helm}"
[ -x "$helm" ] || helm="$(command -v helm)" || { echo "no helm: run scripts/install-helm.sh"; exit 1; }
[ -x "$weir" ] || { echo "no weir binary at $weir: cargo build (or set WEIR_BIN)"; exit 1; }
for tool in kubectl jq curl python3; do command -v $tool >/dev/null || { echo "needs $tool"; exit 1; }; done

id="$(date +%s | tail -c 6)"
work="$(mktemp -d /tmp/weir-real.XXXXXX)"
pids=()
failures=0

log() { printf '%s %s\n' "$(date +%T)" "$*"; }
ok() { log "ok: $*"; }
bad() { log "FAIL: $*"; failures=$((failures + 1)); }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
releases=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # After an unexpected stop: what this run made that is still there.
  for r in "${releases[@]}"; do
    "$helm" status "${r%%/*}" -n "${r#*/}" >/dev/null 2>&1 && "$helm" uninstall "${r%%/*}" -n "${r#*/}" >/dev/null 2>&1
  done
  kubectl delete clusterplugins -l "weir-real=$id" --wait=false >/dev/null 2>&1 || true
  log "logs and files kept in $work"
}
trap cleanup EXIT

# wait_for SECONDS DESCRIPTION COMMAND...: retries COMMAND until it succeeds.
wait_for() {
  local limit=$1 what=$2; shift 2
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $end ]; then bad "$what (not within ${limit}s)"; return 1; fi
    sleep 1
  done
  ok "$what"
}

condition() { # KIND NS NAME STATUS: condition Accepted has STATUS
  local ns_flag=()
  [ -n "$2" ] && ns_flag=(-n "$2")
  [ "$(kubectl get "$1" "${ns_flag[@]}" "$3" -o jsonpath='{.status.conditions[?(@.type=="Accepted")].status}')" = "$4" ]
}

warning_event() { # NS NAME: a Warning Event about NAME in NS
  kubectl get events -n "$1" --field-selector "involvedObject.name=$2,type=Warning" -o name | grep -q .
}

can_i() { # VERB RESOURCE[/SUBRESOURCE] NS: prints yes or no for the ServiceAccount
  local resource=${2%%/*} sub=()
  [ "$resource" != "$2" ] && sub=(--subresource="${2#*/}")
  kubectl auth can-i "$1" "$resource" "${sub[@]}" -n "$3" --as="system:serviceaccount:$ns:$sa" 2>/dev/null || true
}
cannot() { [ "$(can_i "$@")" = no ]; }
can() { [ "$(can_i "$@")" = yes ]; }

run_mode() {
  local mode=$1
  rel="weir-$mode"                 # contains "weir": object names are the release name
  ns="weir-real-$id-${mode:0:3}"   # release namespace
  app="weir-app-$id-${mode:0:3}"   # where the app lives
  local dir="$work/$mode"; mkdir -p "$dir"
  log "=== $mode: release $rel in $ns, app in $app"

  kubectl create namespace "$app" >/dev/null
  # A rate limit counting in Redis (192.0.2.50: nothing connects there, no request uses it),
  # made by the chart: its Secret in the release namespace, its ClusterPlugin.
  local limit="rl-$id-${mode:0:3}"
  local sets=(--set redis.host=192.0.2.50 --set redis.password=not-used
              --set "redis.rateLimits.$limit.minute=5" --set "redis.rateLimits.$limit.limit_by=ip")
  if [ "$mode" = namespaced ]; then sets+=(--set "watchNamespaces={$ns,$app}"); fi

  # 1. install
  releases+=("$rel/$ns")
  if "$helm" install "$rel" "$chart" -n "$ns" --create-namespace "${sets[@]}" > "$dir/install.log" 2>&1; then
    ok "helm install ${sets[*]:-(defaults)}"
  else
    bad "helm install"; cat "$dir/install.log"; return
  fi
  kubectl wait --for condition=established --timeout=30s \
    crd/plugins.weir.dev crd/clusterplugins.weir.dev crd/upstreams.weir.dev crd/consumers.weir.dev >/dev/null \
    && ok "CRDs Established" || bad "CRDs not Established"
  "$helm" get manifest "$rel" -n "$ns" > "$dir/manifest.yaml"
  local want have
  want=$(grep -c '^kind:' "$dir/manifest.yaml")
  have=$( (kubectl get -f "$dir/manifest.yaml" -o name 2>"$dir/get.err" || true) | wc -l)
  if [ "$want" = "$have" ]; then ok "all $want objects of the release exist: $(grep '^kind:' "$dir/manifest.yaml" | sort | uniq -c | awk '{printf "%s %s, ", $1, $3}')"
  else bad "$have of $want objects exist"; cat "$dir/get.err"; fi

  # 2. the controller as the chart's ServiceAccount, the proxy, with the chart's arguments
  sa=$(kubectl -n "$ns" get deployment "$rel" -o jsonpath='{.spec.template.spec.serviceAccountName}')
  local token server
  token=$(kubectl -n "$ns" create token "$sa" --duration=2h)
  server=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
  local ca insecure
  ca=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  insecure=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.insecure-skip-tls-verify}')
  {
    echo "apiVersion: v1"; echo "kind: Config"
    echo "clusters: [{name: c, cluster: {server: \"$server\"$( [ -n "$ca" ] && echo ", certificate-authority-data: $ca")$( [ "$insecure" = true ] && echo ", insecure-skip-tls-verify: true")}}]"
    echo "users: [{name: sa, user: {token: \"$token\"}}]"
    echo "contexts: [{name: c, context: {cluster: c, user: sa}}]"
    echo "current-context: c"
  } > "$dir/sa.kubeconfig"
  local lp tp ap sp mp
  lp=$(free_port); tp=$(free_port); ap=$(free_port); sp=$(free_port); mp=$(free_port)
  kubectl -n "$ns" get deployment "$rel" -o json > "$dir/deployment.json"
  mapfile -t pargs < <(jq -r '.spec.template.spec.containers[] | select(.name=="proxy") | .args[1:][]' "$dir/deployment.json" \
    | sed -e "s|^--listen=.*|--listen=127.0.0.1:$lp|" -e "s|^--tls-listen=.*|--tls-listen=127.0.0.1:$tp|" \
          -e "s|^--admin-listen=.*|--admin-listen=127.0.0.1:$ap|" -e "s|^--status-listen=.*|--status-listen=127.0.0.1:$sp|")
  mapfile -t cargs < <(jq -r '.spec.template.spec.containers[] | select(.name=="controller") | .args[1:][]' "$dir/deployment.json" \
    | sed -e "s|\$(POD_NAMESPACE)|$ns|" -e "s|^--proxy-admin=.*|--proxy-admin=http://127.0.0.1:$ap|" \
          -e "s|^--metrics-listen=.*|--metrics-listen=127.0.0.1:$mp|")
  log "weir proxy ${pargs[*]}"
  RUST_LOG=info "$weir" proxy "${pargs[@]}" > "$dir/proxy.out" 2> "$dir/proxy.log" &
  pids+=($!); local proxy_pid=$!
  log "weir controller ${cargs[*]} (as system:serviceaccount:$ns:$sa)"
  KUBECONFIG="$dir/sa.kubeconfig" POD_NAME="real-$mode" POD_NAMESPACE="$ns" RUST_LOG=info \
    "$weir" controller "${cargs[@]}" > "$dir/controller.log" 2>&1 &
  pids+=($!); local controller_pid=$!

  # 3. an app
  kubectl apply -f - > /dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: $app}
spec:
  ports: [{name: http, port: 80, targetPort: 9000}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-1, namespace: $app, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{name: http, port: 9000}]
endpoints:
- {addresses: [192.0.2.10], conditions: {ready: true}}
---
apiVersion: weir.dev/v1alpha1
kind: Plugin
metadata: {name: request-id, namespace: $app}
spec:
  plugin: correlation-id
  config: {header_name: X-Request-ID}
---
apiVersion: weir.dev/v1alpha1
kind: Plugin
metadata: {name: broken, namespace: $app}
spec:
  plugin: request-termination
  config: {status_code: 9999}
---
apiVersion: weir.dev/v1alpha1
kind: ClusterPlugin
metadata: {name: broken-$id-${mode:0:3}, labels: {weir-real: "$id"}}
spec:
  plugin: request-termination
  config: {status_code: 9999}
---
apiVersion: weir.dev/v1alpha1
kind: Upstream
metadata: {name: echo, namespace: $app}
spec:
  targetRef: {name: echo}
  retries: 2
---
apiVersion: v1
kind: Secret
metadata:
  name: alice-key
  namespace: $app
  labels: {weir.dev/credential: key-auth}
stringData: {key: alice-secret-key}
---
apiVersion: weir.dev/v1alpha1
kind: Consumer
metadata: {name: alice, namespace: $app}
spec:
  credentials: [alice-key]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: echo
  namespace: $app
  annotations: {weir.dev/plugins: request-id}
spec:
  ingressClassName: weir
  rules:
  - http:
      paths:
      - {path: /real-$mode, pathType: Prefix, backend: {service: {name: echo, port: {name: http}}}}
EOF
  kubectl -n "$app" create secret tls a-example-test --cert="$root/tests/fixtures/tls/a.example.test.crt" \
    --key="$root/tests/fixtures/tls/a.example.test.key" > /dev/null
  kubectl -n "$app" patch ingress echo --type=merge \
    -p '{"spec":{"tls":[{"hosts":["a.example.test"],"secretName":"a-example-test"}]}}' > /dev/null
  ok "app applied in $app"
  # No cloud fills in the chart's LoadBalancer Service here: play that part.
  kubectl -n "$ns" patch service "$rel" --subresource=status --type=merge \
    -p '{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.99"}]}}}' > /dev/null

  # 4. checks
  wait_for 60 "the proxy serves the Ingress's route (admin GET /config)" \
    sh -c "curl -sf http://127.0.0.1:$ap/config | grep -q '/real-$mode'"
  wait_for 10 "the status listener's /readyz answers 200" curl -sf "http://127.0.0.1:$sp/readyz"
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$sp/config")" = 404 ] \
    && ok "the status listener does not serve /config" || bad "the status listener serves /config"
  wait_for 30 "Ingress status written (192.0.2.99)" \
    sh -c "[ \"\$(kubectl -n $app get ingress echo -o jsonpath='{.status.loadBalancer.ingress[0].ip}')\" = 192.0.2.99 ]"
  wait_for 30 "Plugin request-id Accepted=True" condition plugin "$app" request-id True
  wait_for 30 "Plugin broken Accepted=False" condition plugin "$app" broken False
  wait_for 30 "ClusterPlugin broken-$id-${mode:0:3} Accepted=False" condition clusterplugin "" "broken-$id-${mode:0:3}" False
  wait_for 30 "Upstream echo Accepted=True" condition upstream "$app" echo True
  wait_for 30 "Consumer alice Accepted=True (its labelled Secret was read)" condition consumer "$app" alice True
  wait_for 30 "Warning Event for Plugin broken in $app" warning_event "$app" broken
  wait_for 30 "Warning Event for ClusterPlugin broken-$id-${mode:0:3} in default" warning_event default "broken-$id-${mode:0:3}"
  wait_for 30 "ClusterPlugin $limit (the chart's Redis rate limit, config from its Secret) Accepted=True" \
    condition clusterplugin "" "$limit" True
  # A TLS handshake with the Ingress's certificate (its Secret read through the TLS watch); the
  # path matches no route, so the answer is Weir's own 404 and nothing is forwarded.
  wait_for 30 "HTTPS with the certificate of the Ingress's TLS Secret (404 from Weir)" \
    sh -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' --cacert '$root/tests/fixtures/tls/ca.crt' \
      --resolve a.example.test:$tp:127.0.0.1 https://a.example.test:$tp/no-such-path)\" = 404 ]"
  wait_for 30 "Lease $rel-leader held by real-$mode" \
    sh -c "[ \"\$(kubectl -n $ns get lease $rel-leader -o jsonpath='{.spec.holderIdentity}')\" = real-$mode ]"
  curl -sf "http://127.0.0.1:$mp/metrics" | grep -q 'weir_controller_pushes_total{result="ok"} [1-9]' \
    && ok "controller metrics: pushes ok" || bad "controller metrics"

  # least privilege, as the API server sees it
  cannot get secrets "$app" && ok "cannot get a Secret by name" || bad "can get Secrets"
  cannot delete ingresses "$app" && ok "cannot delete Ingresses" || bad "can delete Ingresses"
  cannot update ingresses "$app" && ok "cannot update Ingresses (only their status)" || bad "can update Ingresses"
  cannot create configmaps "$app" && ok "cannot create ConfigMaps" || bad "can create ConfigMaps"
  can patch ingresses/status "$app" && ok "can patch ingresses/status" || bad "cannot patch ingresses/status"
  if [ "$mode" = namespaced ]; then
    cannot list secrets kube-system && ok "cannot list Secrets outside watchNamespaces" || bad "can list Secrets in kube-system"
    cannot list ingresses kube-system && ok "cannot list Ingresses outside watchNamespaces" || bad "can list Ingresses in kube-system"
  fi

  if grep -qi forbidden "$dir/controller.log"; then
    bad "'forbidden' in the controller's log:"; grep -i forbidden "$dir/controller.log" | head -5
  else
    ok "no 'forbidden' in the controller's log ($(wc -l < "$dir/controller.log") lines)"
  fi
  kill -TERM "$controller_pid"
  wait "$controller_pid" 2>/dev/null || true
  grep -q "leader lease released" "$dir/controller.log" && ok "controller stopped and released the Lease" \
    || bad "no 'leader lease released' in the controller's log"
  kill -TERM "$proxy_pid"; wait "$proxy_pid" 2>/dev/null || true

  # 5. upgrade, uninstall
  if "$helm" upgrade "$rel" "$chart" -n "$ns" "${sets[@]}" --set proxy.accessLog=false > "$dir/upgrade.log" 2>&1; then
    kubectl -n "$ns" get deployment "$rel" -o json | jq -e '.spec.template.spec.containers[0].args | index("--access-log=false")' >/dev/null \
      && ok "helm upgrade (--access-log=false reached the Deployment)" || bad "helm upgrade did not change the Deployment"
  else
    bad "helm upgrade"; cat "$dir/upgrade.log"
  fi
  if "$helm" uninstall "$rel" -n "$ns" > "$dir/uninstall.log" 2>&1; then
    local left
    left=$( (kubectl get -f "$dir/manifest.yaml" -o name 2>/dev/null || true) | wc -l)
    [ "$left" = 0 ] && ok "helm uninstall: none of the release's objects is left" || bad "helm uninstall left $left objects"
    kubectl get crd plugins.weir.dev >/dev/null 2>&1 && ok "the CRDs stay after uninstall" || bad "the CRDs are gone"
  else
    bad "helm uninstall"; cat "$dir/uninstall.log"
  fi

  # The app's objects go before their namespace: an API server without a controller-manager
  # never finishes deleting a namespace, and objects left in a terminating one would give the
  # next controller Events it may not write there.
  kubectl delete clusterplugin "broken-$id-${mode:0:3}" --wait=false >/dev/null
  kubectl -n "$app" delete ingresses,plugins,upstreams,consumers,secrets,services,endpointslices --all --wait=false >/dev/null
  kubectl delete namespace "$app" "$ns" --wait=false >/dev/null
}

run_mode cluster
run_mode namespaced

if [ $failures -eq 0 ]; then log "all checks passed"; else log "$failures check(s) failed"; exit 1; fi
