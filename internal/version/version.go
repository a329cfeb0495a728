// Package version says what a routed binary is: routed's own build and
// the GoBGP it embeds. That GoBGP is not the module proxy's release but
// third_party/gobgp, the release plus documented patches; Go records a
// directory replacement's version as "(devel)", so the binaries name it
// themselves (`routed version`, `routedctl version`).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

const (
	// GoBGPModule is the module go.mod requires and replaces.
	GoBGPModule = "github.com/osrg/gobgp/v4"
	// GoBGPVersion is the release third_party/gobgp copies and go.mod
	// requires (TestGoModAgrees); tests/gobgpcopy checks the copy against it.
	GoBGPVersion = "v4.8.0"
	// GoBGPPatch names routed's changes to it (third_party/gobgp/PATCHED.md,
	// the diff in PATCHED.diff).
	GoBGPPatch = "routed patch 1: a peer's Adj-RIB-In has 16 shards, not 2,048; patch 2: a peer's first dial is at once; patch 3: connection collisions resolved per RFC 4271 6.8; patch 4: a passive peer dials once at its start (third_party/gobgp/PATCHED.md)"
	// GoBGPReplace is where go.mod points the module.
	GoBGPReplace = "./third_party/gobgp"
)

// GoBGP is how routed names the GoBGP it runs.
func GoBGP() string { return "GoBGP " + GoBGPVersion + " with " + GoBGPPatch }

// String is a binary's version report: routed's build (its module
// version, the VCS revision when recorded, Go and the platform), the
// GoBGP it runs, and what its build info records for GoBGP when it
// links it (the required version and the replacement).
func String(binary string) string {
	var b strings.Builder
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintf(&b, "%s (no build info) %s %s/%s\n", binary, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		fmt.Fprintln(&b, GoBGP())
		return b.String()
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
	}
	fmt.Fprintf(&b, "%s %s %s %s/%s\n", binary, v, bi.GoVersion, runtime.GOOS, runtime.GOARCH)
	linked := false
	for _, d := range bi.Deps {
		linked = linked || d.Path == GoBGPModule
	}
	if linked {
		fmt.Fprintln(&b, GoBGP())
	} else {
		fmt.Fprintln(&b, GoBGP()+" (in routed; "+binary+" does not link it)")
	}
	for _, d := range bi.Deps {
		if d.Path != GoBGPModule {
			continue
		}
		line := "build info: " + d.Path + " " + d.Version
		if d.Replace != nil {
			line += " => " + d.Replace.Path
		}
		if d.Version != GoBGPVersion || d.Replace == nil || d.Replace.Path != GoBGPReplace {
			line += fmt.Sprintf(" (NOT the %s %s of this source: built from another GoBGP)", GoBGPModule, GoBGPVersion)
		}
		fmt.Fprintln(&b, line)
	}
	return b.String()
}
