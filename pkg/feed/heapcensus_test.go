package feed_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// sizeCensus is, for one object size (size class) of a heap dump, the
// objects allocated, and the 8 KiB pages they touch.
type sizeCensus struct {
	size, objects, pages uint64
}

// unused is the bytes of the pages touched that hold no object of the
// dump: free slots of spans that some survivor keeps in use.
func (c sizeCensus) unused() int64 { return int64(c.pages*censusPage) - int64(c.size*c.objects) }

const censusPage = 8192

// heapCensus reads a heap dump (debug.WriteHeapDump, taken after a
// collection, so its objects are the live ones) and returns, per object
// size, the objects and the pages they touch, most unused bytes first.
// The dump lists the heap's objects span by span after its parameters
// and itabs (runtime/heapdump.go, "go1.7 heap dump"); the rest is not
// read.
func heapCensus(path string) ([]sizeCensus, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	hdr := make([]byte, len("go1.7 heap dump\n"))
	if _, err := io.ReadFull(r, hdr); err != nil || string(hdr) != "go1.7 heap dump\n" {
		return nil, fmt.Errorf("%s: not a go1.7 heap dump", path)
	}
	var rerr error
	u := func() uint64 {
		v, err := binary.ReadUvarint(r)
		if err != nil && rerr == nil {
			rerr = err
		}
		return v
	}
	skip := func(n uint64) {
		if _, err := r.Discard(int(n)); err != nil && rerr == nil {
			rerr = err
		}
	}
	bySize := map[uint64]*sizeCensus{}
	pages := map[uint64]map[uint64]bool{}
	for rerr == nil {
		switch tag := u(); tag {
		case 6: // params: big-endian, pointer size, arena start and end, GOARCH, version, CPUs
			for range 4 {
				u()
			}
			skip(u())
			skip(u())
			u()
		case 3: // type: address, size, name, indirect
			u()
			u()
			skip(u())
			u()
		case 8: // itab: address, type
			u()
			u()
		case 1: // object: address, contents, pointer fields until kind 0
			addr, size := u(), u()
			skip(size)
			for kind := u(); kind != 0 && rerr == nil; kind = u() {
				u()
			}
			c := bySize[size]
			if c == nil {
				c = &sizeCensus{size: size}
				bySize[size], pages[size] = c, map[uint64]bool{}
			}
			c.objects++
			for p := addr / censusPage; p <= (addr+size-1)/censusPage; p++ {
				pages[size][p] = true
			}
		default: // past the objects
			out := make([]sizeCensus, 0, len(bySize))
			for s, c := range bySize {
				c.pages = uint64(len(pages[s]))
				out = append(out, *c)
			}
			slices.SortFunc(out, func(a, b sizeCensus) int { return int(b.unused() - a.unused()) })
			return out, nil
		}
	}
	if errors.Is(rerr, io.EOF) {
		rerr = io.ErrUnexpectedEOF
	}
	return nil, fmt.Errorf("%s: %w", path, rerr)
}

// censusText is a census's total and its first n sizes, one a line.
func censusText(cs []sizeCensus, n int) string {
	var live, touched uint64
	for _, c := range cs {
		live += c.size * c.objects
		touched += c.pages * censusPage
	}
	var b strings.Builder
	fmt.Fprintf(&b, "live %.1f MiB of objects in %.1f MiB of pages they touch (%.1f MiB unused)", mib(live), mib(touched),
		mib(touched-live))
	for _, c := range cs[:min(n, len(cs))] {
		fmt.Fprintf(&b, "\n  %5d B: %7d objects, %6.2f MiB in %6.2f MiB of pages (%4.1f %%), %6.2f MiB unused", c.size, c.objects,
			mib(c.size*c.objects), mib(c.pages*censusPage), 100*float64(c.size*c.objects)/float64(c.pages*censusPage),
			float64(c.unused())/(1<<20))
	}
	return b.String()
}
