package k8s_test

import (
	"context"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestImageBuild runs the image's build step (deploy/build.sh, which is
// what deploy/Dockerfile runs) and checks its result against what the
// Dockerfile and the manifests expect: there is no Docker engine here,
// so this is the image build short of packaging.
func TestImageBuild(t *testing.T) {
	skipShort(t)
	dockerfile := readFile(t, deployPath("Dockerfile"))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^FROM (--platform=\S+ )?golang:\$\{GO_VERSION\}\S* AS build$`),
		regexp.MustCompile(`(?m)^RUN .*sh deploy/build\.sh /out$`),
		regexp.MustCompile(`(?m)^FROM gcr\.io/distroless/static\S*$`),
		regexp.MustCompile(`(?m)^COPY --from=build /out/ /$`),
	} {
		if !want.MatchString(dockerfile) {
			t.Errorf("deploy/Dockerfile has no line matching %s", want)
		}
	}

	// The builder's Go is the one go.mod asks for.
	goMod := readFile(t, filepath.Join(repoRoot(), "go.mod"))
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(goMod)
	if m == nil || !strings.Contains(dockerfile, "\nARG GO_VERSION="+m[1]+"\n") {
		t.Errorf("deploy/Dockerfile: ARG GO_VERSION must be go.mod's Go version (%v)", m)
	}

	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "sh", "deploy/build.sh", out)
	cmd.Dir = repoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/build.sh: %v\n%s", err, b)
	}
	t.Logf("deploy/build.sh took %s", time.Since(start).Round(time.Second))

	want := []string{
		"usr/local/bin/routed", "usr/local/bin/routed-controllers", "usr/local/bin/routedctl",
		"opt/cni/bin/routed-cni", "opt/cni/bin/routed-ipam",
		"opt/cni/bin/routed-cni-full", "opt/cni/bin/routed-ipam-full",
		"opt/cni/bin/loopback", "opt/cni/bin/portmap", "opt/cni/bin/bandwidth",
	}
	for _, p := range want {
		path := filepath.Join(out, p)
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s: missing or not executable (%v)", p, err)
			continue
		}
		// distroless/static has no libc: every binary must be static.
		f, err := elf.Open(path)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
				t.Errorf("%s is dynamically linked; the distroless static base has no libc", p)
				break
			}
		}
		f.Close()
	}
	// Nothing but the CNI plugins in the directory install-cni copies to
	// the host: routed's socket-only plugins with their full builds, and
	// the reference plugins the manifests chain.
	entries, _ := os.ReadDir(filepath.Join(out, "opt/cni/bin"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	wantBin := []string{"bandwidth", "loopback", "portmap", "routed-cni", "routed-cni-full", "routed-ipam", "routed-ipam-full"}
	if !slices.Equal(names, wantBin) {
		t.Errorf("opt/cni/bin holds %v, want %v; install-cni copies all of it to the host", names, wantBin)
	}

	// Every command the manifests run exists in the image.
	for _, f := range []string{"routed.yaml", "rr-mode.yaml"} {
		for _, o := range readDocs(t, deployPath(f)) {
			spec := podSpec(o)
			for _, c := range containers(spec) {
				cmd := list(c["command"])
				if len(cmd) == 0 {
					t.Errorf("%s: container %s has no command (the image's entrypoint is routed)", o.id(), c["name"])
					continue
				}
				if _, err := os.Stat(filepath.Join(out, str(cmd[0]))); err != nil {
					t.Errorf("%s: container %s runs %s, which the image does not have", o.id(), c["name"], cmd[0])
				}
			}
		}
	}

	// The binaries run.
	v := exec.Command(filepath.Join(out, "opt/cni/bin/routed-cni"))
	v.Env = []string{"CNI_COMMAND=VERSION"}
	b, err := v.Output()
	var vr struct {
		Supported []string `json:"supportedVersions"`
	}
	if err != nil || json.Unmarshal(b, &vr) != nil || len(vr.Supported) == 0 {
		t.Errorf("routed-cni VERSION: %v %s", err, b)
	}
	if b, err := exec.Command(filepath.Join(out, "usr/local/bin/routed"), "--help").CombinedOutput(); err != nil || !strings.Contains(string(b), "--role") {
		t.Errorf("routed --help: %v\n%s", err, b)
	}
}
