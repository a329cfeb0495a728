package nftdp

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// setKeys reads the keys of every element of a named set in one netlink
// dump (NFT_MSG_GETSETELEM) and hands each to each, without decoding
// elements into the library's SetElement values: a resync reads every
// address set back, and at 150,000 pods in the cluster the library's
// GetSetElements held about 40 MB of elements and decoders during it
// (a node's heap profile in make scale-big, issue 36), memory the heap
// then kept. begin is called before each attempt (a dump the kernel
// marks as interrupted is read again), so that the caller starts over;
// key is only valid during the call. A missing set has no elements.
func (r *ruleDumper) setKeys(fam nftables.TableFamily, table, set string, begin func(), each func(key []byte)) error {
	return r.dump(fam, unix.NFT_MSG_GETSETELEM, unix.NFT_MSG_NEWSETELEM, "set "+set+" of "+table,
		[]netlink.Attribute{
			{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: []byte(table + "\x00")},
			{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: []byte(set + "\x00")},
		},
		begin,
		func(b []byte) error { return eachElemKey(b, each) })
}

// eachElemKey walks one NEWSETELEM message's element list and hands
// each element's key (NFTA_SET_ELEM_KEY's NFTA_DATA_VALUE) to each,
// a slice of b: nothing is allocated per element.
func eachElemKey(b []byte, each func(key []byte)) error {
	return walkAttrs(b, func(typ uint16, list []byte) error {
		if typ != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
			return nil
		}
		return walkAttrs(list, func(typ uint16, el []byte) error {
			if typ != unix.NFTA_LIST_ELEM {
				return nil
			}
			return walkAttrs(el, func(typ uint16, key []byte) error {
				if typ != unix.NFTA_SET_ELEM_KEY {
					return nil
				}
				return walkAttrs(key, func(typ uint16, v []byte) error {
					if typ == unix.NFTA_DATA_VALUE {
						each(v)
					}
					return nil
				})
			})
		})
	})
}

// walkAttrs calls fn with the type (without the nested and byte-order
// flags) and data of each netlink attribute in b, in order.
func walkAttrs(b []byte, fn func(typ uint16, data []byte) error) error {
	for len(b) > 0 {
		if len(b) < unix.SizeofNlAttr {
			return fmt.Errorf("nftdp: %d bytes left, shorter than an attribute header", len(b))
		}
		n := int(binary.NativeEndian.Uint16(b[0:2]))
		typ := binary.NativeEndian.Uint16(b[2:4]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if n < unix.SizeofNlAttr || n > len(b) {
			return fmt.Errorf("nftdp: attribute of length %d in %d bytes", n, len(b))
		}
		if err := fn(typ, b[unix.SizeofNlAttr:n]); err != nil {
			return err
		}
		// Attributes are padded to 4 bytes; the last one may not be.
		n = (n + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
		if n >= len(b) {
			return nil
		}
		b = b[n:]
	}
	return nil
}
