package flowagg

import (
	"reflect"
	"time"
	"unsafe"
)

// What the window charges an entry against MaxBytes is an estimate of
// the heap it holds, not its JSON size: a decoded record holds much
// more than its JSON (measured before this estimate: 2.1x with 10
// realistic labels an end, 6.9x with 150 one-byte labels an end, which
// the node's 4 KiB label cap allows), mostly in its label maps. The
// estimate walks the entry's decoded form: each string, map, slice and
// pointed-to struct, rounded up to Go's allocation size classes, and
// each map as Go 1.24+'s swiss tables lay it out (groups of 8 slots
// plus a control word, at most 7/8 full, capacity a power of two).
// Short strings are charged a whole 16-byte block (see heldBy), so
// the estimate errs high: TestWindowHeapWithinBudget, filling a window
// through decodeBatch and reading runtime.MemStats, found the window
// holding 0.95x its budget with realistic labels, 0.82x with tiny ones,
// 0.83x without labels (0.97x to 1.00x under -race, whose runtime
// allocates more).

// slotBytes is what an entry's place in the window costs: its Entry
// in buf and its size in sizes, times 2.5, as buf may be twice the
// live entries before it compacts and append leaves spare capacity.
const slotBytes = (unsafe.Sizeof(Entry{}) + unsafe.Sizeof(0)) * 5 / 2

// heapSize estimates the heap entry e holds once in the window.
func heapSize(e *Entry) int {
	return int(slotBytes) + heldBy(reflect.ValueOf(e).Elem())
}

var timeType = reflect.TypeFor[time.Time]()

// heldBy is the heap v refers to, not counting v itself (which lives
// in its parent). Nothing the window holds is cyclic.
func heldBy(v reflect.Value) int {
	switch v.Kind() {
	case reflect.String:
		if n := v.Len(); n > 0 && n < 16 {
			// Go packs pointer-free objects under 16 bytes into
			// 16-byte blocks, but one keeps its block live while it
			// lives, and the others in it are mostly the decoder's
			// garbage: charged the block.
			return 16
		}
		return allocSize(uintptr(v.Len()))
	case reflect.Pointer:
		if v.IsNil() {
			return 0
		}
		return allocSize(v.Type().Elem().Size()) + heldBy(v.Elem())
	case reflect.Slice:
		if v.IsNil() {
			return 0
		}
		return allocSize(uintptr(v.Cap())*v.Type().Elem().Size()) + heldByElems(v)
	case reflect.Array:
		return heldByElems(v)
	case reflect.Map:
		if v.IsNil() {
			return 0
		}
		n := mapSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			n += heldBy(it.Key()) + heldBy(it.Value())
		}
		return n
	case reflect.Struct:
		if v.Type() == timeType {
			if !v.CanInterface() {
				return 0
			}
			return zoneSize(v.Interface().(time.Time))
		}
		n := 0
		for i := range v.NumField() {
			n += heldBy(v.Field(i))
		}
		return n
	case reflect.Interface:
		if v.IsNil() {
			return 0
		}
		e := v.Elem()
		return allocSize(e.Type().Size()) + heldBy(e)
	}
	return 0
}

// heldByElems is what the elements of slice or array v refer to.
func heldByElems(v reflect.Value) int {
	n := 0
	for i := range v.Len() {
		n += heldBy(v.Index(i))
	}
	return n
}

// zoneSize is what a time's zone holds of its own: a time decoded with
// an offset that is not a whole hour (and not the local one) gets a
// Location of its own (time.FixedZone caches only whole hours), about
// 160 bytes with its zone and transition.
func zoneSize(t time.Time) int {
	loc := t.Location()
	if loc == time.UTC || loc == time.Local {
		return 0
	}
	name, off := t.Zone()
	if name == "" && off%3600 == 0 && off >= -12*3600 && off <= 14*3600 {
		return 0
	}
	return 160
}

// mapSize is the heap of a map of n entries of type t, without what
// its keys and values refer to: the map header, then one group of 8
// slots up to 8 entries, else tables whose capacity is a power of two
// at most 7/8 full (a table splits past 1,024 slots; the total is
// about the same).
func mapSize(t reflect.Type, n int) int {
	const header = 48 // internal/runtime/maps.Map
	slot := t.Key().Size() + t.Elem().Size()
	if t.Key().Size() > 128 || t.Elem().Size() > 128 {
		slot = 16 // stored indirectly; the pointed-to copies are not counted
	}
	group := 8 + 8*slot
	if n == 0 {
		return header
	}
	if n <= 8 {
		return header + allocSize(group)
	}
	capacity := uintptr(16)
	for capacity*7/8 < uintptr(n) {
		capacity *= 2
	}
	tables := max(capacity/1024, 1)
	const table = 32 // internal/runtime/maps.table
	return header + allocSize(tables*8) + int(tables)*allocSize(table) +
		int(tables)*allocSize(min(capacity, 1024)/8*group)
}

// sizeClasses are Go's small allocation sizes
// (internal/runtime/gc/sizeclasses.go).
var sizeClasses = [...]uint16{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// allocSize is the heap an allocation of n bytes takes: its size
// class, whole 8 KiB pages past 32 KiB.
func allocSize(n uintptr) int {
	switch {
	case n == 0:
		return 0
	case n > 32768:
		return int((n + 8191) &^ 8191)
	}
	for _, c := range sizeClasses {
		if uintptr(c) >= n {
			return int(c)
		}
	}
	return int(n)
}
