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
	"flag"
	"fmt"
	"os"
	"os/exec"

	"github.com/routed-net/routed/internal/ociimage"
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
	d, err := ociimage.WriteFile(out, tag, root, ociimage.Config{
		Entrypoint: []string{"/usr/local/bin/routed"},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "routed",
			"org.opencontainers.image.description": "routed: BGP-routed pod networking for Kubernetes (node daemon, CNI plugin, IPAM, CLI)",
			"org.opencontainers.image.source":      "https://github.com/routed-net/routed",
		},
	})
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s, %s)\n", out, tag, d)
	return nil
}
