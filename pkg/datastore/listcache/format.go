package listcache

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"syscall"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The file: magic, a JSON header (length-prefixed), records (tag 1, then
// key, value and the key's revisions), tag 0, the record count, and a
// CRC-32C of every byte before it. Keys are in strictly increasing
// order, so two files (or a file and a set of changes) merge in one pass.
const (
	magic      = "RFCACHE1"
	tagRecord  = 1
	tagEnd     = 0
	maxHeader  = 1 << 20
	maxKeyLen  = 1 << 16
	maxValLen  = 64 << 20
	formatVers = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header says what a file is a copy of.
type header struct {
	Version   int      `json:"version"`
	Prefix    string   `json:"prefix"`
	Parts     []string `json:"parts"`
	ProbeKey  string   `json:"probeKey"`
	ClusterID uint64   `json:"clusterID"`
	Revision  int64    `json:"revision"`
	Written   int64    `json:"written"` // unix seconds
}

// errCorrupt marks a file that does not read as a whole cache.
var errCorrupt = errors.New("listcache: corrupt")

// writer writes one file's records through a checksum.
type writer struct {
	w     *bufio.Writer
	crc   hash.Hash32
	n     uint64
	last  []byte
	buf   [binary.MaxVarintLen64]byte
	first bool
}

// Note: bufio.Writer's WriteString, Write and WriteByte keep their first
// error and return it again from Flush, so finish reports any write
// failure.

func newWriter(w io.Writer, h header) (*writer, error) {
	fw := &writer{crc: crc32.New(castagnoli), first: true}
	fw.w = bufio.NewWriterSize(io.MultiWriter(w, fw.crc), 1<<20)
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	fw.w.WriteString(magic)
	fw.uvarint(uint64(len(hb)))
	fw.w.Write(hb)
	return fw, nil
}

func (fw *writer) uvarint(v uint64) {
	n := binary.PutUvarint(fw.buf[:], v)
	fw.w.Write(fw.buf[:n])
}

func (fw *writer) varint(v int64) {
	n := binary.PutVarint(fw.buf[:], v)
	fw.w.Write(fw.buf[:n])
}

// record writes one key; keys must come in strictly increasing order.
func (fw *writer) record(kv *mvccpb.KeyValue) error {
	if !fw.first && bytes.Compare(kv.Key, fw.last) <= 0 {
		return fmt.Errorf("listcache: key %q written after %q: keys must be in increasing order", kv.Key, fw.last)
	}
	fw.first = false
	fw.last = append(fw.last[:0], kv.Key...)
	fw.w.WriteByte(tagRecord)
	fw.uvarint(uint64(len(kv.Key)))
	fw.w.Write(kv.Key)
	fw.uvarint(uint64(len(kv.Value)))
	fw.w.Write(kv.Value)
	fw.varint(kv.CreateRevision)
	fw.varint(kv.ModRevision)
	fw.varint(kv.Version)
	fw.n++
	return nil
}

// finish writes the end, the count and the checksum, and flushes.
func (fw *writer) finish() error {
	fw.w.WriteByte(tagEnd)
	var cnt [8]byte
	binary.LittleEndian.PutUint64(cnt[:], fw.n)
	fw.w.Write(cnt[:])
	if err := fw.w.Flush(); err != nil {
		return err
	}
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], fw.crc.Sum32())
	fw.w.Write(sum[:]) // after the flush: not part of the checksum
	return fw.w.Flush()
}

// reader reads a file's records. Every byte but the checksum is fed to
// the checksum as it is read: open the file with openFile.
type reader struct {
	r   *bufio.Reader
	h   header
	n   uint64
	kv  mvccpb.KeyValue
	err error
	// reuse: next reads each record's key and value into buffers it
	// keeps, so fr.kv holds only until the next call: for a pass that
	// keeps nothing (a merge, a check). A 150,000-pod file is about
	// 200 MB, which copies made garbage once per write (half of what a
	// node allocated under churn, issue 36). Else every record has its
	// own copies, for a reader whose caller keeps them.
	reuse bool
	// keyBuf alternates between two buffers: the previous key, which
	// next compares with, stays intact while the new one is read.
	keyBuf [2][]byte
	valBuf []byte
}

// file is an open cache file being read.
type file struct {
	*reader
	f    *os.File
	crc  hash.Hash32
	size int64
}

// openFile opens path for reading its records, having checked that it
// is a regular file only its owner (this process's user) can write.
func openFile(path string) (*file, error) {
	f, size, err := openPrivate(path)
	if err != nil {
		return nil, err
	}
	fl, err := readFrom(f, size)
	if err != nil {
		f.Close()
		return nil, err
	}
	return fl, nil
}

// openPrivate opens path, a regular file only its owner (this process's
// user) can write, and returns it with its size.
func openPrivate(path string) (*os.File, int64, error) {
	// O_NOFOLLOW: a symlink planted at the path is refused, not read.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err == nil {
		err = private(st)
	}
	if err == nil && st.Size() < int64(len(magic))+13 {
		err = fmt.Errorf("%w: %d bytes, too short", errCorrupt, st.Size())
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// readFrom reads f (size bytes) from its start: its header now, its
// records through next. It does not close f on error.
func readFrom(f *os.File, size int64) (*file, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	crc := crc32.New(castagnoli)
	body := io.TeeReader(io.LimitReader(f, size-4), crc)
	r, err := newReader(bufio.NewReaderSize(body, 1<<20))
	if err != nil {
		return nil, err
	}
	return &file{reader: r, f: f, crc: crc, size: size}, nil
}

// private refuses a cache file others could have written.
func private(st os.FileInfo) error {
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: not a regular file (%s)", errNotPrivate, st.Mode())
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: mode %o lets others write it", errNotPrivate, st.Mode().Perm())
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: owned by uid %d, not %d", errNotPrivate, sys.Uid, os.Geteuid())
	}
	return nil
}

// errNotPrivate marks a file others could have written.
var errNotPrivate = errors.New("listcache: not private")

// close checks, after next returned false, the count, that nothing
// follows, and the checksum; and closes the file.
func (fl *file) close() error {
	defer fl.f.Close()
	return fl.verify()
}

// verify checks, after next returned false, the count, that nothing
// follows, and the checksum.
func (fl *file) verify() error {
	if err := fl.reader.end(); err != nil {
		return err
	}
	var sum [4]byte
	if _, err := fl.f.ReadAt(sum[:], fl.size-4); err != nil {
		return fmt.Errorf("%w: checksum unreadable: %w", errCorrupt, err)
	}
	if got, want := fl.crc.Sum32(), binary.LittleEndian.Uint32(sum[:]); got != want {
		return fmt.Errorf("%w: checksum %08x, file says %08x", errCorrupt, got, want)
	}
	return nil
}

func newReader(r *bufio.Reader) (*reader, error) {
	fr := &reader{r: r}
	m := make([]byte, len(magic))
	if _, err := io.ReadFull(fr.r, m); err != nil || string(m) != magic {
		return nil, fmt.Errorf("%w: not a feed cache (bad magic)", errCorrupt)
	}
	n, err := binary.ReadUvarint(fr.r)
	if err != nil || n > maxHeader {
		return nil, fmt.Errorf("%w: unreadable header length", errCorrupt)
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(fr.r, hb); err != nil {
		return nil, fmt.Errorf("%w: truncated header", errCorrupt)
	}
	if err := json.Unmarshal(hb, &fr.h); err != nil {
		return nil, fmt.Errorf("%w: header: %w", errCorrupt, err)
	}
	if fr.h.Version != formatVers {
		return nil, fmt.Errorf("%w: format version %d, want %d", errCorrupt, fr.h.Version, formatVers)
	}
	return fr, nil
}

// next reads the next record into fr.kv, with its own copies of key and
// value unless fr.reuse; false at the end or on error (fr.err).
func (fr *reader) next() bool {
	if fr.err != nil {
		return false
	}
	tag, err := fr.r.ReadByte()
	if err != nil {
		fr.err = fmt.Errorf("%w: truncated after %d records", errCorrupt, fr.n)
		return false
	}
	if tag == tagEnd {
		return false
	}
	if tag != tagRecord {
		fr.err = fmt.Errorf("%w: bad record tag %d after %d records", errCorrupt, tag, fr.n)
		return false
	}
	prev := fr.kv.Key
	var keyBuf, valBuf *[]byte
	if fr.reuse {
		keyBuf, valBuf = &fr.keyBuf[fr.n%2], &fr.valBuf
	}
	key, err := fr.bytes(maxKeyLen, keyBuf)
	if err != nil {
		fr.err = err
		return false
	}
	if fr.n > 0 && bytes.Compare(key, prev) <= 0 {
		fr.err = fmt.Errorf("%w: key %q after %q: not in increasing order", errCorrupt, key, prev)
		return false
	}
	val, err := fr.bytes(maxValLen, valBuf)
	if err != nil {
		fr.err = err
		return false
	}
	var revs [3]int64
	for i := range revs {
		if revs[i], err = binary.ReadVarint(fr.r); err != nil {
			fr.err = fmt.Errorf("%w: truncated record %d", errCorrupt, fr.n)
			return false
		}
	}
	fr.kv = mvccpb.KeyValue{Key: key, Value: val, CreateRevision: revs[0], ModRevision: revs[1], Version: revs[2]}
	fr.n++
	return true
}

// bytes reads a length-prefixed byte string into a new slice, or into
// *buf (grown as needed) when buf is not nil.
func (fr *reader) bytes(limit uint64, buf *[]byte) ([]byte, error) {
	n, err := binary.ReadUvarint(fr.r)
	if err != nil || n > limit {
		return nil, fmt.Errorf("%w: unreadable length in record %d", errCorrupt, fr.n)
	}
	var out []byte
	switch {
	case buf == nil:
		out = make([]byte, n)
	case uint64(cap(*buf)) >= n:
		out = (*buf)[:n]
	default:
		*buf = make([]byte, n)
		out = *buf
	}
	if _, err := io.ReadFull(fr.r, out); err != nil {
		return nil, fmt.Errorf("%w: truncated record %d", errCorrupt, fr.n)
	}
	return out, nil
}

// end checks the count and that nothing follows it.
func (fr *reader) end() error {
	if fr.err != nil {
		return fr.err
	}
	var cnt [8]byte
	if _, err := io.ReadFull(fr.r, cnt[:]); err != nil {
		return fmt.Errorf("%w: truncated end", errCorrupt)
	}
	if got := binary.LittleEndian.Uint64(cnt[:]); got != fr.n {
		return fmt.Errorf("%w: %d records, the file says %d", errCorrupt, fr.n, got)
	}
	if _, err := fr.r.ReadByte(); err != io.EOF {
		return fmt.Errorf("%w: bytes after the end", errCorrupt)
	}
	return nil
}
