// Command image builds routed's container image without a Docker engine
// (make image): it runs deploy/build.sh, the Dockerfile's build step,
// and packages what it built as a one-layer image on an empty base,
// written as an image tarball that both `docker load` and
// `ctr -n k8s.io images import` read. deploy/Dockerfile stays the way to
// build it with Docker; both give the same files.
//
//	go run ./deploy/image -o bin/routed-image.tar -tag routed:dev
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	out := flag.String("o", "bin/routed-image.tar", "image tarball to write")
	tag := flag.String("tag", "routed:dev", "image reference stored in the tarball")
	root := flag.String("root", "", "use this already built tree (deploy/build.sh's output) instead of building")
	flag.Parse()
	if err := run(*out, *tag, *root); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(out, tag, root string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag %q: %w", tag, err)
	}
	if root == "" {
		dir, err := os.MkdirTemp("", "routed-image-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cmd := exec.Command("sh", "deploy/build.sh", dir)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("deploy/build.sh: %w", err)
		}
		root = dir
	}
	img, err := Build(root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	d, _ := img.Digest()
	fmt.Printf("wrote %s (%s, %s)\n", out, ref.Name(), d)
	return nil
}

// epoch stamps the files and the image: the same binaries give the same
// image digest.
var epoch = time.Unix(0, 0).UTC()

// Build packages root as routed's image: routed as the entrypoint, run
// as root (the DaemonSet's containers need it), plus what the
// distroless base would have given it: /tmp, and /etc/passwd and
// /etc/group naming root.
func Build(root string) (v1.Image, error) {
	layerTar, err := treeTar(root, map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\n",
		"etc/group":  "root:x:0:\n",
	})
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{"/usr/local/bin/routed"}
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "routed",
		"org.opencontainers.image.description": "routed: BGP-routed pod networking for Kubernetes (node daemon, CNI plugin, IPAM, CLI)",
		"org.opencontainers.image.source":      "https://github.com/routed-net/routed",
	}
	return mutate.ConfigFile(img, cf)
}

// treeTar is root's files (owned by root, modes kept, times at epoch)
// and extra files, with /tmp, as one uncompressed tar.
func treeTar(root string, extra map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	addDir := func(p string, mode int64) error {
		if p == "." || dirs[p] {
			return nil
		}
		dirs[p] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, ModTime: epoch})
	}
	if err := addDir("tmp", 0o1777); err != nil {
		return nil, err
	}
	if err := addDir("etc", 0o755); err != nil {
		return nil, err
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return addDir(rel, int64(info.Mode().Perm()))
		case info.Mode().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: int64(info.Mode().Perm()), Size: int64(len(data)), ModTime: epoch}); err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return fmt.Errorf("%s: only directories and regular files belong in the image", path)
	})
	if err != nil {
		return nil, err
	}
	for _, p := range []string{"etc/passwd", "etc/group"} {
		data := extra[p]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o644, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
