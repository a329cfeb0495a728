// Package policytable reads what the CNI plugin needs of felix's policy
// tables: whether a pod's interface is programmed. Only felix writes them.
package policytable

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/pkg/kernel"
)

// Programmed reports whether felix has programmed iface in the policy
// tables of the namespace netnsFd (-1: the caller's): the interface is in
// both dispatch maps of the table of each family asked (v4, v6: the
// pod's address families; neither: both) that exists, and at least one
// of those tables exists. felix dispatches an interface only in the
// tables of its endpoint's families. The CNI plugin asks before ADD
// returns, so a pod starts only once its policy (or its profiles'
// allow) is in force. It only reads. table "" is kernel.PolicyTable.
func Programmed(netnsFd int, table, iface string, v4, v6 bool) (bool, error) {
	if table == "" {
		table = kernel.PolicyTable
	}
	if !v4 && !v6 {
		v4, v6 = true, true
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
		if (i == 0 && !v4) || (i == 1 && !v6) {
			continue
		}
		t := &nftables.Table{Name: table, Family: fam}
		for _, m := range []string{kernel.PolicyFromWorkloadMap, kernel.PolicyToWorkloadMap} {
			set, err := c.GetSetByName(t, m)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) {
					if m == kernel.PolicyFromWorkloadMap {
						break // no table of this family (yet)
					}
					return false, nil
				}
				return false, fmt.Errorf("reading %s %s: %w", table, m, err)
			}
			if m == kernel.PolicyFromWorkloadMap {
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

// ifnameKey is an interface name as the maps key it: IFNAMSIZ bytes,
// NUL-padded.
func ifnameKey(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}
