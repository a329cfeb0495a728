package ctl

import (
	"context"
	"fmt"
	"io"
	"os"

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

// decodeFile reads and decodes a resource file, printing warnings.
func decodeFile(cmd *cobra.Command, g *globals, path string) ([]api.Resource, error) {
	data, err := readFile(cmd, path)
	if err != nil {
		return nil, err
	}
	dec, err := api.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, w := range dec.Warnings {
		fmt.Fprintf(g.errOut, "Warning: %s\n", w)
	}
	// Validate everything before writing anything, so a typo in the
	// third document does not leave the first two applied.
	for _, r := range dec.Resources {
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return dec.Resources, nil
}

func newWriteCmd(g *globals, verb, short string) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   verb + " -f FILE",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rs, err := decodeFile(cmd, g, file)
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
			if rs, err = tiersFirst(cmd.Context(), c, rs); err != nil {
				return err
			}
			return writeAll(cmd.Context(), c, verb, rs, g.out)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "file with one or more resources (YAML or JSON; - for stdin)")
	return cmd
}

func writeAll(ctx context.Context, c *datastore.Client, verb string, rs []api.Resource, out io.Writer) error {
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
			return err
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
	var file, namespace string
	var force bool
	cmd := &cobra.Command{
		Use:   "delete (-f FILE | KIND NAME...)",
		Short: "Delete resources named in a file or on the command line",
		RunE: func(cmd *cobra.Command, args []string) error {
			type ref struct {
				kind api.Kind
				name string
			}
			var refs []ref
			switch {
			case file != "" && len(args) > 0:
				return usageError("give either -f FILE or KIND NAME, not both")
			case file != "":
				// Only kind and name count, as with calicoctl: a file
				// holding just those (or a spec that no longer
				// validates) deletes what it names.
				data, err := readFile(cmd, file)
				if err != nil {
					return err
				}
				rs, err := api.DecodeRefs(data)
				if err != nil {
					return fmt.Errorf("%s: %w", file, err)
				}
				for _, r := range rs {
					refs = append(refs, ref{r.Kind, r.Name})
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
					refs = append(refs, ref{k, sn})
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
					return err
				}
			}
			fmt.Fprintf(g.out, "Successfully deleted %d resource(s)\n", len(refs))
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "file naming the resources to delete (- for stdin)")
	cmd.Flags().BoolVar(&force, "force", false, "delete IP pools even while addresses in them are allocated")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "namespace of NetworkPolicy and NetworkSet names (or write NAMESPACE/NAME)")
	return cmd
}
