package feed

import (
	"errors"
	"fmt"
	"runtime"
	"slices"

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
	dec  *zstd.Decoder
}

// errUnpack says a packed value could not be read back: it is
// unreadable, as a stored value that does not decode.
var errUnpack = errors.New("feed: a listed value could not be unpacked")

// newPackEncoder is a list's encoder; its tables (about half a MiB with
// the decoder) go with the list, not kept by a small node for good.
func newPackEncoder() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
	if err != nil {
		panic("feed: the packs' encoder: " + err.Error()) // fixed, valid options
	}
	return e
}

// maxUnpacked bounds what one pack unpacks to: packValues values of at
// most datastore's value size each would be more than any list holds; a
// pack is the feed's own, so this only guards its reader.
const maxUnpacked = 64 << 20

// newPackDecoder is the decoder a list's packs share (DecodeAll only: it
// starts no goroutine, and goes with the last of them).
func newPackDecoder() *zstd.Decoder {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxMemory(maxUnpacked))
	if err != nil {
		panic("feed: the packs' decoder: " + err.Error()) // fixed, valid options
	}
	return d
}

// packer packs a list's values as the list is read (the feed's
// goroutine), and hands the items on (out) once their values are packed.
type packer struct {
	items []item // taken, not handed on yet; in order
	vals  int    // how many of them have a value
	raw   []byte // scratch: their values' concatenation
	z     []byte // scratch: compressed
	enc   *zstd.Encoder
	dec   *zstd.Decoder // the packs'
	out   func([]item)
}

// add takes it; its value (if it has one) goes into the next pack, made
// once it holds packValues.
func (p *packer) add(it item) {
	p.items = append(p.items, it)
	if it.value != nil {
		p.vals++
	}
	if p.vals == packValues {
		p.flush()
	}
}

// flush packs the values taken so far and hands their items on. out
// copies what it keeps: the array is reused.
func (p *packer) flush() {
	if len(p.items) == 0 {
		return
	}
	if p.vals > 0 {
		if p.enc == nil {
			p.enc, p.dec = newPackEncoder(), newPackDecoder()
		}
		pk := &pack{ends: make([]uint32, 0, p.vals), dec: p.dec}
		p.raw = p.raw[:0]
		for _, it := range p.items {
			if it.value != nil {
				p.raw = append(p.raw, it.value...)
				pk.ends = append(pk.ends, uint32(len(p.raw)))
			}
		}
		p.z = p.enc.EncodeAll(p.raw, p.z[:0])
		pk.z = slices.Clone(p.z) // exactly its size: the encoder's buffer is scratch
		j := 0
		for i := range p.items {
			if p.items[i].value != nil {
				p.items[i].value, p.items[i].pk, p.items[i].pi = nil, pk, uint16(j)
				j++
			}
		}
	}
	p.out(p.items)
	clear(p.items)
	p.items, p.vals = p.items[:0], 0
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
		raw, err := it.pk.dec.DecodeAll(it.pk.z, nil)
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
