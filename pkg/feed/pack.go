package feed

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// A list's values are kept packed: packValues of them at a time,
// concatenated and compressed, from the moment the list reads them until
// each consumer decoded its copy. A big cluster's list holds every
// object's value until then, its biggest part the endpoints' (150,000 of
// about 1 KB: 147 MB raw, 15 MB packed by 64, 9.9x; issue 36: a node's
// live heap reached 213 MB by the end of its start-up list). Packing
// them costs about 1.4 ms and unpacking 0.5 ms per thousand values on
// this project's 2-core reference machine, against about 25 ms to decode
// them. Changes from the watch stay unpacked: they are few at a time.

// packValues is how many values a pack holds: enough for the values'
// shared structure (field names, namespaces, labels) to compress well,
// few enough that unpacking one to decode one value costs little.
const packValues = 64

// pack is packValues (or, a list's last, fewer) values, concatenated and
// compressed. Read-only once made: the consumers' copies of a list's
// items share it, and each item of it keeps it live until decoded.
type pack struct {
	z    []byte   // the values, concatenated, compressed
	ends []uint32 // where each value ends in the concatenation
}

// errUnpack says a packed value could not be read back: it is
// unreadable, as a stored value that does not decode.
var errUnpack = errors.New("feed: a listed value could not be unpacked")

var packEncoder = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
	if err != nil {
		panic("feed: the packs' encoder: " + err.Error()) // fixed, valid options
	}
	return e
})

// maxUnpacked bounds what one pack unpacks to: packValues values of at
// most datastore's value size each would be more than any list holds; a
// pack is the feed's own, so this only guards its reader.
const maxUnpacked = 64 << 20

var packDecoder = sync.OnceValue(func() *zstd.Decoder {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxMemory(maxUnpacked))
	if err != nil {
		panic("feed: the packs' decoder: " + err.Error()) // fixed, valid options
	}
	return d
})

// packer packs a list's values as the list is read (the feed's
// goroutine).
type packer struct {
	at  []int  // the items, by index, whose values are not packed yet
	raw []byte // scratch: their concatenation
	z   []byte // scratch: compressed
}

// add takes items[i]'s value (if it has one) into the next pack, and
// packs once it holds packValues.
func (p *packer) add(items []item, i int) {
	if items[i].value == nil {
		return
	}
	p.at = append(p.at, i)
	if len(p.at) == packValues {
		p.flush(items)
	}
}

// flush packs the values taken so far.
func (p *packer) flush(items []item) {
	if len(p.at) == 0 {
		return
	}
	pk := &pack{ends: make([]uint32, len(p.at))}
	p.raw = p.raw[:0]
	for j, i := range p.at {
		p.raw = append(p.raw, items[i].value...)
		pk.ends[j] = uint32(len(p.raw))
	}
	p.z = packEncoder().EncodeAll(p.raw, p.z[:0])
	pk.z = slices.Clone(p.z) // exactly its size: the encoder's buffer is scratch
	for j, i := range p.at {
		items[i].value, items[i].pk, items[i].pi = nil, pk, uint16(j)
	}
	p.at = p.at[:0]
}

// unpacker reads items' values back, keeping the last pack it unpacked
// (a decoding goroutine's items come in key order, a pack's together).
type unpacker struct {
	pk  *pack
	raw []byte
}

// value is it's stored value. A packed one is a part of the pack's
// unpacked bytes, which are not reused: what decodes from it may keep
// parts of it.
func (u *unpacker) value(it item) ([]byte, error) {
	if it.pk == nil {
		return it.value, nil
	}
	if u.pk != it.pk {
		raw, err := packDecoder().DecodeAll(it.pk.z, nil)
		if err != nil {
			u.pk, u.raw = nil, nil
			return nil, fmt.Errorf("%w: %w", errUnpack, err)
		}
		u.pk, u.raw = it.pk, raw
	}
	var lo uint32
	if it.pi > 0 {
		lo = it.pk.ends[it.pi-1]
	}
	hi := it.pk.ends[it.pi]
	if lo > hi || int(hi) > len(u.raw) {
		return nil, fmt.Errorf("%w: value %d ends at %d of %d bytes", errUnpack, it.pi, hi, len(u.raw))
	}
	return u.raw[lo:hi:hi], nil
}

// decoding is one decoding goroutine's state: the strings it shares and
// the pack it last unpacked.
type decoding struct {
	sh sharer
	up unpacker
}

func newDecoding() *decoding { return &decoding{sh: sharer{}} }

// kept is it's value for an update to keep (Update.Value): a packed
// value's own copy, so that it does not keep its whole pack's bytes.
func (d *decoding) kept(it item) []byte {
	if it.pk == nil {
		return it.value
	}
	v, err := d.up.value(it)
	if err != nil {
		return nil
	}
	return slices.Clone(v)
}
