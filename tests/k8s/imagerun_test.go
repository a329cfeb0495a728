package k8s_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// TestImageRunsInContainerd: `make image` (deploy/image) builds routed's
// image without a Docker engine; a real containerd (Debian's, with a
// private root, state and socket) imports the tarball as kubelet's
// namespace would hold it, and runs routed and routed-cni from it with
// runc.
func TestImageRunsInContainerd(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	image := filepath.Join(dir, "routed-image.tar")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	build := exec.CommandContext(ctx, "go", "run", "./deploy/image", "-o", image, "-tag", "routed:imagetest")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go run ./deploy/image: %v\n%s", err, out)
	}
	st, err := os.Stat(image)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("image built in %s: %d MiB", time.Since(start).Round(time.Second), st.Size()>>20)

	sock := startContainerd(t, dir)
	ctr := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", sock, "-n", "k8s.io"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ctr %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := ctr("images", "import", image)
	if !strings.Contains(out, "docker.io/library/routed:imagetest") {
		t.Fatalf("import did not name the image:\n%s", out)
	}
	ref := "docker.io/library/routed:imagetest"
	id := fmt.Sprintf("routed-imagetest-%d", os.Getpid())
	out = ctr("run", "--rm", ref, id, "/usr/local/bin/routed", "--help")
	if !strings.Contains(out, "routed runs on every node") {
		t.Errorf("routed in the image:\n%s", out)
	}
	out = ctr("run", "--rm", "--env", "CNI_COMMAND=VERSION", ref, id+"-cni", "/opt/cni/bin/routed-cni")
	if !strings.Contains(out, `"supportedVersions"`) || !strings.Contains(out, "1.1.0") {
		t.Errorf("routed-cni in the image (CNI VERSION):\n%s", out)
	}
	t.Logf("routed-cni VERSION in the image: %s", strings.TrimSpace(out))
}

// startContainerd runs Debian's containerd with its root, state and
// socket under dir, and stops it (by its PID) when the test ends.
func startContainerd(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("containerd"); err != nil {
		t.Fatalf("containerd not installed: run tests/ensure-deps.sh (make deps)")
	}
	conf := filepath.Join(dir, "containerd.toml")
	if err := os.WriteFile(conf, []byte("version = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "containerd.sock")
	cmd := exec.Command("containerd", "--config", conf, "--root", filepath.Join(dir, "root"),
		"--state", filepath.Join(dir, "state"), "--address", sock)
	cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("containerd log:\n%s", tail(string(b), 40))
		}
	})
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
		out, err := exec.Command("ctr", "--address", sock, "version").CombinedOutput()
		if err == nil && strings.Contains(string(out), "Server:") {
			return ""
		}
		b, _ := os.ReadFile(logf.Name())
		return fmt.Sprintf("containerd did not come up: ctr version: %v: %s\ncontainerd log:\n%s", err, out, tail(string(b), 40))
	})
	return sock
}

func tail(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
