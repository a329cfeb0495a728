//go:build !cnithin

// Command routed-cni is routed's CNI plugin. Run as "routed-cni install"
// (or through a link named "install") it is the installer that the
// DaemonSet's init container runs to put the plugins and their
// configuration on the node.
package main

import (
	"os"
	"path/filepath"
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/routed-net/routed/cniplugin/install"
	"github.com/routed-net/routed/cniplugin/k8spod"
	"github.com/routed-net/routed/cniplugin/plugin"
)

func init() {
	// Namespace switches apply to one OS thread: keep main on the thread
	// group leader so host-side work always happens in the host netns.
	runtime.LockOSThread()
}

func main() {
	if filepath.Base(os.Args[0]) == "install" || (len(os.Args) > 1 && os.Args[1] == "install") {
		os.Exit(install.Main(os.Args[0]))
	}
	// Pod labels, service account, ports and IPAM annotations come from
	// the Kubernetes API.
	pods := k8spod.NewSource()
	p := &plugin.Plugin{Pods: pods}
	skel.PluginMainFuncs(pods.Funcs(p), plugin.Versions, "routed-cni: routed's CNI plugin (run \"routed-cni install\" to install it on a node)")
}
