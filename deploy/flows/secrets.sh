#!/bin/sh
# Creates what the flows component (deploy/flows) needs in kube-system,
# and keeps a copy for the operator in OUT_DIR (mode 0700):
#
#   Secret routed-flows-tls     tls.crt, tls.key: the aggregator's serving
#                               certificate, signed by a CA of its own;
#                               client-ca: ETCD_CA_FILE, the CA of the
#                               nodes' etcd client certificates
#   Secret routed-flows-token   token: the readers' token (routedctl
#                               flows, the page)
#   ConfigMap routed-flows-ca   ca.crt: the aggregator's CA, which the
#                               nodes check the aggregator against
#
#   OUT_DIR/ca.pem, ca-key.pem, tls.crt, tls.key, token
#
# Usage: deploy/flows/secrets.sh ETCD_CA_FILE [OUT_DIR]   (default ./routed-flows-pki)
#
# The certificate names the Service (routed-flows, .kube-system,
# .kube-system.svc, .kube-system.svc.cluster.local) and localhost and
# 127.0.0.1 (kubectl port-forward). FLOWS_EXTRA_SANS adds names, e.g.
# FLOWS_EXTRA_SANS=IP:10.96.0.99,DNS:flows.example.com. Run it again to
# replace everything (a new CA, certificate and token: restart
# routed-flows-aggregator and routed-node afterwards). kubectl is $KUBECTL
# (default kubectl), with your usual kubeconfig.
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 ETCD_CA_FILE [OUT_DIR]" >&2
	exit 2
fi
etcd_ca=$1
out=${2:-routed-flows-pki}
kubectl=${KUBECTL:-kubectl}
if [ ! -s "$etcd_ca" ]; then
	echo "$0: ETCD_CA_FILE $etcd_ca: no such file or empty (the CA of the nodes' etcd client certificates)" >&2
	exit 2
fi
if ! openssl x509 -noout -in "$etcd_ca" 2>/dev/null; then
	echo "$0: ETCD_CA_FILE $etcd_ca: not a PEM certificate" >&2
	exit 2
fi

umask 077
mkdir -p "$out"
chmod 700 "$out"

sans="DNS:routed-flows,DNS:routed-flows.kube-system,DNS:routed-flows.kube-system.svc,DNS:routed-flows.kube-system.svc.cluster.local,DNS:localhost,IP:127.0.0.1"
if [ -n "${FLOWS_EXTRA_SANS:-}" ]; then
	sans="$sans,$FLOWS_EXTRA_SANS"
fi

openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
	-subj "/CN=routed-flows CA" -keyout "$out/ca-key.pem" -out "$out/ca.pem" 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	-subj "/CN=routed-flows" -keyout "$out/tls.key" -out "$out/tls.csr" 2>/dev/null
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$sans" >"$out/tls.ext"
openssl x509 -req -in "$out/tls.csr" -CA "$out/ca.pem" -CAkey "$out/ca-key.pem" -CAcreateserial \
	-days 825 -extfile "$out/tls.ext" -out "$out/tls.crt" 2>/dev/null
rm -f "$out/tls.csr" "$out/tls.ext" "$out/ca.srl"
openssl rand -hex 32 >"$out/token"

# Server-side apply: a client-side apply would copy the private key and
# the token into the object's last-applied-configuration annotation.
$kubectl -n kube-system create secret generic routed-flows-tls \
	--from-file=tls.crt="$out/tls.crt" --from-file=tls.key="$out/tls.key" --from-file=client-ca="$etcd_ca" \
	--dry-run=client -o yaml | $kubectl apply --server-side --force-conflicts --field-manager=routed-flows-secrets -f -
$kubectl -n kube-system create secret generic routed-flows-token --from-file=token="$out/token" \
	--dry-run=client -o yaml | $kubectl apply --server-side --force-conflicts --field-manager=routed-flows-secrets -f -
$kubectl -n kube-system create configmap routed-flows-ca --from-file=ca.crt="$out/ca.pem" \
	--dry-run=client -o yaml | $kubectl apply --server-side --force-conflicts --field-manager=routed-flows-secrets -f -
echo "routed-flows: Secrets routed-flows-tls, routed-flows-token and ConfigMap routed-flows-ca in kube-system; CA and token in $out"
