package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// readFile reads -f FILE, or standard input for "-".
func readFile(cmd *cobra.Command, path string) ([]byte, error) {
	if path == "" {
		return nil, usageError("-f FILE is required (use - for standard input)")
	}
	if path == "-" {
		return io.ReadAll(cmd.InOrStdin())
	}
	return os.ReadFile(path)
}

// fileName is how errors name -f FILE.
func fileName(path string) string {
	if path == "-" {
		return "standard input"
	}
	return path
}

// origins remembers which file and document each decoded resource came
// from, so that every error about it, up to the write, names them.
type origins map[api.Resource]origin

type origin struct{ file, doc string }

// locate names r's file and document in err.
func (o origins) locate(err error, r api.Resource) error {
	at, ok := o[r]
	if !ok {
		return err
	}
	return api.Locate(err, at.file, at.doc, r)
}

// decodeFiles reads and decodes every -f FILE, printing warnings, and
// validates everything before anything is written, so a typo in the
// third document (or the second file) does not leave the others
// applied.
func decodeFiles(cmd *cobra.Command, g *globals, paths []string) ([]api.Resource, origins, error) {
	if len(paths) == 0 {
		return nil, nil, usageError("-f FILE is required (use - for standard input)")
	}
	var all []api.Resource
	where := origins{}
	for _, path := range paths {
		data, err := readFile(cmd, path)
		if err != nil {
			return nil, nil, err
		}
		name := fileName(path)
		dec, err := api.Decode(data)
		if err != nil {
			return nil, nil, fileError(err, name)
		}
		for _, w := range dec.Warnings {
			fmt.Fprintf(g.errOut, "Warning: %s: %s\n", name, w)
		}
		for i, r := range dec.Resources {
			where[r] = origin{file: name, doc: dec.Docs[i]}
			if r.GetKind() == api.KindServiceEndpoints {
				// felix enforces these records as the Service's endpoints:
				// only routed-controllers writes them, from EndpointSlices.
				return nil, nil, where.locate(fmt.Errorf("%w: %s records are written by routed-controllers from the Service's EndpointSlices, never with routedctl: name the Service in a rule and the controllers keep its record", api.ErrInvalid, api.KindServiceEndpoints), r)
			}
			if err := r.Validate(); err != nil {
				return nil, nil, where.locate(err, r)
			}
		}
		all = append(all, dec.Resources...)
	}
	return all, where, nil
}

// fileError names file in an error about the whole of it (or one of its
// documents, when the error says which).
func fileError(err error, file string) error {
	var de *api.DocError
	if errors.As(err, &de) {
		return api.Locate(err, file, "", nil)
	}
	return fmt.Errorf("%s: %w", file, err)
}

func newWriteCmd(g *globals, verb, short string) *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   verb + " -f FILE [-f FILE...]",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rs, where, err := decodeFiles(cmd, g, files)
			if err != nil {
				return err
			}
			c, err := g.connect()
			if err != nil {
				return err
			}
			defer c.Close()
			// A datastore routedctl writes to has an identity from then
			// on, so one without it is known to be wiped or replaced.
			if _, err := c.InitClusterInfo(cmd.Context()); err != nil {
				return err
			}
			if err := ensureTiersFor(cmd.Context(), c, rs); err != nil {
				return err
			}
			ordered, err := tiersFirst(cmd.Context(), c, rs)
			if err != nil {
				return where.locate(err, missingTier(cmd.Context(), c, rs))
			}
			return writeAll(cmd.Context(), c, verb, ordered, where, g.out)
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "file with one or more resources (YAML or JSON; - for stdin); repeat for several files")
	return cmd
}

// missingTier finds the policy tiersFirst refused (the first whose tier
// exists neither in the datastore nor among rs' tiers), to say where it
// is; nil if none is found.
func missingTier(ctx context.Context, c *datastore.Client, rs []api.Resource) api.Resource {
	var tiers []api.Resource
	for _, r := range rs {
		if r.GetKind() == api.KindTier {
			tiers = append(tiers, r)
		}
	}
	for _, r := range rs {
		if _, isPolicy := r.(api.Policy); !isPolicy {
			continue
		}
		if _, err := tiersFirst(ctx, c, append(slices.Clip(tiers), r)); err != nil {
			return r
		}
	}
	return nil
}

func writeAll(ctx context.Context, c *datastore.Client, verb string, rs []api.Resource, where origins, out io.Writer) error {
	for i, r := range rs {
		var err error
		switch verb {
		case "apply":
			_, err = c.Apply(ctx, r)
		case "create":
			_, err = c.Create(ctx, r)
		case "replace":
			// A resourceVersion in the file (from "get -o yaml") makes the
			// replace fail if someone changed the object since.
			if r.Meta().ResourceVersion == "" {
				var cur api.Resource
				if cur, err = c.Get(ctx, r.GetKind(), api.StoreName(r)); err != nil {
					break
				}
				r.Meta().ResourceVersion = cur.Meta().ResourceVersion
			}
			_, err = c.Update(ctx, r)
		}
		if err != nil {
			if i > 0 {
				fmt.Fprintf(out, "Partial success: %d of %d resource(s) %s before the error\n", i, len(rs), pastTense(verb))
			}
			return where.locate(err, r)
		}
	}
	fmt.Fprintf(out, "Successfully %s %d resource(s)\n", pastTense(verb), len(rs))
	return nil
}

func pastTense(verb string) string {
	switch verb {
	case "apply":
		return "applied"
	case "create":
		return "created"
	case "replace":
		return "replaced"
	}
	return "deleted"
}

func newDeleteCmd(g *globals) *cobra.Command {
	var files []string
	var namespace string
	var force bool
	cmd := &cobra.Command{
		Use:   "delete (-f FILE | KIND NAME...)",
		Short: "Delete resources named in a file or on the command line",
		RunE: func(cmd *cobra.Command, args []string) error {
			type ref struct {
				kind api.Kind
				name string
				// file and doc say where -f named it ("" on the
				// command line).
				file, doc string
			}
			var refs []ref
			switch {
			case len(files) > 0 && len(args) > 0:
				return usageError("give either -f FILE or KIND NAME, not both")
			case len(files) > 0:
				// Only kind and name count, as with calicoctl: a file
				// holding just those (or a spec that no longer
				// validates) deletes what it names.
				for _, file := range files {
					data, err := readFile(cmd, file)
					if err != nil {
						return err
					}
					rs, docs, err := api.DecodeRefsDocs(data)
					if err != nil {
						return fileError(err, fileName(file))
					}
					for i, r := range rs {
						refs = append(refs, ref{r.Kind, r.Name, fileName(file), docs[i]})
					}
				}
			case len(args) >= 2:
				k, err := api.ParseKind(args[0])
				if err != nil {
					return err
				}
				for _, n := range args[1:] {
					sn, err := storeName(k, namespace, n)
					if err != nil {
						return err
					}
					refs = append(refs, ref{kind: k, name: sn})
				}
			default:
				return usageError("delete needs -f FILE or KIND NAME")
			}
			c, err := g.connect()
			if err != nil {
				return err
			}
			defer c.Close()
			for i, r := range refs {
				var err error
				if r.kind == api.KindIPPool {
					// Counted and deleted in one conditional write, so
					// an address allocated meanwhile cannot slip by.
					err = ipam.New(c).DeletePool(cmd.Context(), r.name, force)
				} else {
					err = c.Delete(cmd.Context(), r.kind, r.name, "")
				}
				if err != nil {
					if i > 0 {
						fmt.Fprintf(g.out, "Partial success: %d of %d resource(s) deleted before the error\n", i, len(refs))
					}
					if r.file != "" {
						ns, name := api.SplitStoreName(r.kind, r.name)
						return &api.DocError{File: r.file, Doc: r.doc, Kind: string(r.kind), Name: displayName(ns, name), Err: err}
					}
					return err
				}
			}
			fmt.Fprintf(g.out, "Successfully deleted %d resource(s)\n", len(refs))
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "file naming the resources to delete (- for stdin); repeat for several files")
	cmd.Flags().BoolVar(&force, "force", false, "delete IP pools even while addresses in them are allocated")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "namespace of NetworkPolicy and NetworkSet names (or write NAMESPACE/NAME)")
	return cmd
}

// displayName names an object as a file does: "namespace/name".
func displayName(namespace, name string) string {
	if namespace != "" {
		return namespace + "/" + name
	}
	return name
}
