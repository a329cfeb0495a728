package nftdp

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// Programmed reports whether felix has programmed iface in the policy
// tables of the namespace netnsFd (-1: the caller's): the interface is in
// both interface maps of the table of each of fams (the pod's address
// families, 0: both) that exists, and at least one of those tables
// exists. felix dispatches an interface only in the tables of its
// endpoint's families (see Families). The CNI plugin asks before ADD
// returns, so a pod starts only once its policy (or its profiles'
// allow) is in force. It only reads.
func Programmed(netnsFd int, table, iface string, fams Families) (bool, error) {
	if table == "" {
		table = DefaultTable
	}
	var opts []nftables.ConnOption
	if netnsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(netnsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	tables := 0
	key := ifnameKey(iface)
	for i, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		if !fams.has(i) {
			continue
		}
		t := &nftables.Table{Name: table, Family: fam}
		for _, m := range []string{FromWLIfaces, ToWLIfaces} {
			set, err := c.GetSetByName(t, m)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) {
					if m == FromWLIfaces {
						break // no table of this family (yet)
					}
					return false, nil
				}
				return false, fmt.Errorf("reading %s %s: %w", table, m, err)
			}
			if m == FromWLIfaces {
				tables++
			}
			elems, err := c.GetSetElements(set)
			if err != nil {
				return false, fmt.Errorf("reading %s %s: %w", table, m, err)
			}
			found := false
			for _, e := range elems {
				if bytes.Equal(e.Key, key) {
					found = true
					break
				}
			}
			if !found {
				return false, nil
			}
		}
	}
	return tables > 0, nil
}
