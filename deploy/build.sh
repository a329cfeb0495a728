#!/bin/sh
# Builds the binaries of routed's image into OUT (default /out), laid out
# as the image has them:
#   OUT/usr/local/bin/  routed, routed-controllers, routedctl
#   OUT/opt/cni/bin/    routed-cni, routed-ipam (socket-only builds, tag
#                       cnithin), routed-cni-full, routed-ipam-full (the
#                       full builds they hand over to), and the reference
#                       loopback, portmap and bandwidth plugins that the
#                       conflist chains (install-cni copies this directory
#                       to the host's /opt/cni/bin)
# Run from the module root. deploy/Dockerfile runs it, and so does
# tests/k8s (TestImageBuild), so what the image holds is tested here
# without a Docker engine. GOOS/GOARCH cross-compile as usual.
set -eu

out=${1:-/out}
# The reference plugins' release; the same version as go.mod's
# containernetworking/plugins.
CNI_PLUGINS_VERSION=${CNI_PLUGINS_VERSION:-v1.9.1}

export CGO_ENABLED=0
# -buildvcs=false: the image's build context has no .git.
export GOFLAGS="-buildvcs=false"
ldflags="-s -w"

mkdir -p "$out/usr/local/bin" "$out/opt/cni/bin"
go build -trimpath -ldflags "$ldflags" -o "$out/usr/local/bin/" ./routed/cmd/routed ./routed/cmd/routed-controllers ./routed/cmd/routedctl
for p in routed-cni routed-ipam; do
	go build -trimpath -ldflags "$ldflags" -tags cnithin -o "$out/opt/cni/bin/$p" ./cniplugin/cmd/$p
	go build -trimpath -ldflags "$ldflags" -o "$out/opt/cni/bin/$p-full" ./cniplugin/cmd/$p
done

# The reference plugins are built in their own module (its go.mod and
# go.sum, from the module proxy), not ours: `go install pkg@version`
# would do the same but refuses to cross-compile into a directory.
plugins=$(cd / && GOWORK=off go mod download -json "github.com/containernetworking/plugins@$CNI_PLUGINS_VERSION" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
if [ -z "$plugins" ] || [ ! -f "$plugins/go.mod" ]; then
	echo "build.sh: cannot download github.com/containernetworking/plugins@$CNI_PLUGINS_VERSION" >&2
	exit 1
fi
(cd "$plugins" && GOWORK=off go build -trimpath -ldflags "$ldflags" -o "$out/opt/cni/bin/" \
	./plugins/main/loopback ./plugins/meta/portmap ./plugins/meta/bandwidth)

ls -l "$out/usr/local/bin" "$out/opt/cni/bin"
