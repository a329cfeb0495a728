package netconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

func restoreStdLogger(t *testing.T) {
	std := logrus.StandardLogger()
	out, lvl, fmtr := std.Out, std.GetLevel(), std.Formatter
	t.Cleanup(func() {
		std.SetOutput(out)
		std.SetLevel(lvl)
		std.SetFormatter(fmtr)
		std.ReplaceHooks(logrus.LevelHooks{})
	})
}

// TestCNILogIsRotated: the log is rotated at log_file_max_size (it grew
// without bound) and the rotated file is kept beside it.
func TestCNILogIsRotated(t *testing.T) {
	restoreStdLogger(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "cni.log")
	log, closeLog := OpenLog(&NetConf{LogFilePath: path, LogFileMaxSize: 1}, "c1", "ADD")
	line := strings.Repeat("x", 1024)
	for i := 0; i < 1300; i++ { // 1.3 MB of log with a 1 MB limit
		log.Info(line)
	}
	closeLog()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var rotated []string
	for _, e := range ents {
		if e.Name() != "cni.log" && strings.HasPrefix(e.Name(), "cni-") {
			rotated = append(rotated, e.Name())
		}
	}
	if len(rotated) != 1 {
		t.Fatalf("want one rotated file beside cni.log, have %v", ents)
	}
	st, err := os.Stat(path)
	if err != nil || st.Size() > 1<<20 || st.Mode().Perm() != 0o600 {
		t.Fatalf("cni.log after rotation: %v %v, want at most 1 MB, mode 0600", st, err)
	}
}

// TestCNILogRefusesSymlink: a symlink at the log path is not followed
// (root appended pod names and addresses to whatever it named).
func TestCNILogRefusesSymlink(t *testing.T) {
	restoreStdLogger(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cni.log")
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	log, closeLog := OpenLog(&NetConf{LogFilePath: path}, "c2", "ADD")
	log.Info("pod 10.0.0.1")
	closeLog()
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Fatalf("log written through the symlink: %q", b)
	}
}

// A plugin whose executable was removed (routed uninstalled while an ADD
// or DEL waited for it) writes no log file: the uninstall removed it and
// it must not come back. Until then the file is written as usual.
func TestLogFileOnlyWhileInstalled(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "routed-cni")
	if err := os.WriteFile(exe, nil, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cni.log")
	f, err := openLogFile(&NetConf{}, path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := whileInstalled{w: f, exe: exe}
	if _, err := w.Write([]byte("installed\n")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "installed\n" {
		t.Fatalf("while installed the log holds %q (%v), want the line", b, err)
	}
	// The uninstall: the plugin's files and the log go.
	if err := os.Remove(exe); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("after the uninstall\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the log file is back after the uninstall (%v)", err)
	}
}
