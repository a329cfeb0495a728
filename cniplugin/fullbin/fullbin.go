// Package fullbin hands a CNI invocation from a socket-only build of
// routed-cni or routed-ipam (build tag cnithin) to the full build
// installed beside it as "<name>-full".
//
// The socket-only build links no etcd client, gRPC, protobuf or
// Prometheus, so a process costs a few milliseconds of CPU instead of
// tens (their package initialisation): it serves ADD and DEL when routed
// answers on the node's CNI socket and VERSION, and execs the full
// build for everything else, which then behaves exactly as the single
// binary did (asking routed again, then doing the work itself under the
// host IPAM lock).
//
// Invariant: a hand-over replaces the process (execve), so the runtime
// sees one plugin process with the full build's stdout and exit code;
// the full build gets the same arguments, environment and stdin, from
// its first byte, whatever the socket-only build read of it.
package fullbin

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"
)

// Suffix is appended to a plugin's name to name its full build.
const Suffix = "-full"

// ErrNotInstalled: the full build is not beside the plugin nor in
// CNI_PATH.
var ErrNotInstalled = errors.New("fullbin: full build not installed")

// KeepStdin reads the whole of stdin into an in-memory file and makes
// os.Stdin that file, so that Exec can give the full build the same
// stdin after the plugin has read it. Call it before anything reads
// stdin.
func KeepStdin() error {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	fd, err := unix.MemfdCreate("cni-stdin", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("keep stdin: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "cni-stdin")
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("keep stdin: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return fmt.Errorf("keep stdin: %w", err)
	}
	os.Stdin = f
	return nil
}

// Path finds the full build of name: beside this executable (symlinks
// resolved), else in CNI_PATH.
func Path(name string) (string, error) {
	full := name + Suffix
	var dirs []string
	if self, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(self); err == nil {
			self = real
		}
		dirs = append(dirs, filepath.Dir(self))
	}
	dirs = append(dirs, filepath.SplitList(os.Getenv("CNI_PATH"))...)
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, full)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s is neither beside %s nor in CNI_PATH %q; install it (install-cni copies it) or run the full build as %s",
		ErrNotInstalled, full, name, os.Getenv("CNI_PATH"), name)
}

// Exec replaces this process with the full build of name, with this
// process's arguments and environment and, when KeepStdin ran, its
// stdin rewound to the start. It must run on the main thread in the
// host network namespace (the plugins lock main to the thread group
// leader in init). It returns only on failure.
func Exec(name string) error {
	path, err := Path(name)
	if err != nil {
		return err
	}
	if f := os.Stdin; f.Name() == "cni-stdin" {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("hand over to %s: rewind stdin: %w", path, err)
		}
		if err := unix.Dup3(int(f.Fd()), 0, 0); err != nil {
			return fmt.Errorf("hand over to %s: stdin: %w", path, err)
		}
	}
	argv := append([]string{path}, os.Args[1:]...)
	err = syscall.Exec(path, argv, os.Environ())
	return fmt.Errorf("hand over to %s: %w", path, err)
}

// Serve decides, before anything reads stdin, whether the socket-only
// build serves this invocation itself: ADD and DEL (with stdin kept for
// a later hand-over) and VERSION. Anything else (CHECK, GC, STATUS, no
// CNI_COMMAND, the installer's arguments) is handed to the full build at
// once. When the hand-over or keeping stdin fails, it prints the CNI
// error and exits 1, as skel does.
func Serve(name string) {
	var err error
	switch os.Getenv("CNI_COMMAND") {
	case "VERSION":
		return
	case "ADD", "DEL":
		if len(os.Args) < 2 {
			if err = KeepStdin(); err == nil {
				return
			}
			break
		}
		fallthrough
	default:
		err = Exec(name)
	}
	_ = types.NewError(types.ErrInternal, fmt.Sprintf("%s: %v", name, err), "").Print()
	os.Exit(1)
}
