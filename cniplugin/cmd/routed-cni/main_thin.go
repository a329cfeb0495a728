//go:build cnithin

// Command routed-cni, socket-only build (cniplugin/fullbin): it serves
// ADD and DEL when routed answers on the node's CNI socket, and hands
// everything else, the installer included, to routed-cni-full beside it.
package main

import (
	"os"
	"path/filepath"
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/routed-net/routed/cniplugin/fullbin"
	"github.com/routed-net/routed/cniplugin/k8spod"
	"github.com/routed-net/routed/cniplugin/plugin"
)

func init() {
	// Namespace switches apply to one OS thread: keep main on the thread
	// group leader so host-side work always happens in the host netns,
	// and a hand-over (execve) runs from there.
	runtime.LockOSThread()
}

func main() {
	if filepath.Base(os.Args[0]) == "install" {
		// The full build is the installer when its first argument says so.
		os.Args = append([]string{os.Args[0], "install"}, os.Args[1:]...)
	}
	fullbin.Serve(plugin.PluginName)
	pods := k8spod.NewSource()
	p := &plugin.Plugin{Pods: pods}
	skel.PluginMainFuncs(pods.Funcs(p), plugin.Versions, "routed-cni: routed's CNI plugin (run \"routed-cni install\" to install it on a node)")
}
