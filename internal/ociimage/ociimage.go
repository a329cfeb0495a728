// Package ociimage builds container images from a directory tree
// without a Docker engine (go-containerregistry): one layer on an empty
// base, written as an image tarball that `docker load` and
// `ctr images import` both read.
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Config is what the image runs.
type Config struct {
	Entrypoint []string
	Cmd        []string
	Labels     map[string]string
}

// WriteFile builds root's image and writes it to path under tag; it
// returns the image's digest.
func WriteFile(path, tag, root string, cfg Config) (string, error) {
	ref, err := name.NewTag(tag)
	if err != nil {
		return "", fmt.Errorf("tag %q: %w", tag, err)
	}
	img, err := Build(root, cfg)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	if err := tarball.WriteToFile(path, ref, img); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	d, err := img.Digest()
	return d.String(), err
}

// epoch stamps the files and the image: the same binaries give the same
// image digest.
var epoch = time.Unix(0, 0).UTC()

// Build packages root as an image running cfg as root, with what a
// distroless base would give it: /tmp, and /etc/passwd and /etc/group
// naming root.
func Build(root string, c Config) (v1.Image, error) {
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
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.Labels = c.Entrypoint, c.Cmd, c.Labels
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
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
