package datastore

import (
	"context"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Once a list has read every Node, the ranges its cuts leave (listcuts.go)
// are read side by side by listReaders requests at a time, and handed on
// in key order all the same: a range read ahead of the one being handed
// on is held until its turn. Under churn a list waits for etcd, not for
// the node's CPU (a node listing 150,000 endpoints in 25 s used 1.6 s of
// CPU): scale-big's list probe, in the same runs, read them in 13.3-41.9
// s one range at a time and in 4.0-7.9 s four at a time. What is held
// ahead is bounded by listAheadBytes: a reader of a range that is not
// the one being handed on waits before its next page while more is held.

var (
	// listReaders is how many ranges of a list are read at once.
	listReaders = 4
	// listAheadBytes bounds the keys and values read ahead of the range
	// being handed on (a range of 100 nodes' endpoints is about 3 MB at
	// 30 pods a node).
	listAheadBytes = 12 << 20
)

// readAhead reads ranges side by side and hands their pages on in order.
type readAhead struct {
	cancel  context.CancelFunc
	readers int

	mu       sync.Mutex
	cond     *sync.Cond
	ranges   []aheadRange
	handing  int  // the range whose pages next() hands on
	taken    int  // ranges a reader has taken
	held     int  // bytes read and not handed on
	closed   bool // close was called: readers stop
	finished int  // readers that returned
}

// aheadRange is one range and what was read of it.
type aheadRange struct {
	key, end string
	pages    []*clientv3.GetResponse
	done     bool  // read to its end
	err      error // the read failed
}

// readRanges starts reading ranges ([bounds[i], bounds[i+1]), the last
// to end) at rev.
func (c *Client) readRanges(ctx context.Context, bounds []string, end string, rev int64) *readAhead {
	ctx, cancel := context.WithCancel(ctx)
	ra := &readAhead{cancel: cancel}
	ra.cond = sync.NewCond(&ra.mu)
	for i, b := range bounds {
		r := aheadRange{key: b, end: end}
		if i+1 < len(bounds) {
			r.end = bounds[i+1]
		}
		ra.ranges = append(ra.ranges, r)
	}
	ra.readers = min(listReaders, len(bounds))
	for range ra.readers {
		go ra.read(ctx, c, rev)
	}
	return ra
}

// read takes ranges in order and reads each to its end.
func (ra *readAhead) read(ctx context.Context, c *Client, rev int64) {
	defer func() {
		ra.mu.Lock()
		ra.finished++
		ra.cond.Broadcast()
		ra.mu.Unlock()
	}()
	for {
		ra.mu.Lock()
		if ra.closed || ra.taken == len(ra.ranges) {
			ra.mu.Unlock()
			return
		}
		i := ra.taken
		ra.taken++
		key, end := ra.ranges[i].key, ra.ranges[i].end
		ra.mu.Unlock()
		for {
			ra.mu.Lock()
			for !ra.closed && i != ra.handing && ra.held >= listAheadBytes {
				ra.cond.Wait()
			}
			closed := ra.closed
			ra.mu.Unlock()
			if closed {
				return
			}
			resp, err := c.listPageRetrying(ctx, key, end, rev)
			ra.mu.Lock()
			r := &ra.ranges[i]
			if err != nil {
				r.err = err
				ra.cond.Broadcast()
				ra.mu.Unlock()
				return
			}
			more := resp.More && len(resp.Kvs) > 0
			r.pages = append(r.pages, resp)
			r.done = !more
			ra.held += pageBytes(resp.Kvs)
			ra.cond.Broadcast()
			ra.mu.Unlock()
			if !more {
				break
			}
			key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
}

// next hands on the next page in key order, nil when every range was
// handed on whole.
func (ra *readAhead) next() (*clientv3.GetResponse, error) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	for ra.handing < len(ra.ranges) {
		r := &ra.ranges[ra.handing]
		switch {
		case len(r.pages) > 0:
			page := r.pages[0]
			r.pages[0] = nil
			r.pages = r.pages[1:]
			ra.held -= pageBytes(page.Kvs)
			ra.cond.Broadcast()
			return page, nil
		case r.err != nil:
			return nil, r.err
		case r.done:
			ra.handing++
			ra.cond.Broadcast()
		default:
			ra.cond.Wait()
		}
	}
	return nil, nil
}

// close stops the readers and waits for them to return.
func (ra *readAhead) close() {
	ra.cancel()
	ra.mu.Lock()
	defer ra.mu.Unlock()
	ra.closed = true
	ra.cond.Broadcast()
	for ra.finished < ra.readers {
		ra.cond.Wait()
	}
	ra.ranges = nil
}

// pageBytes is what a page's keys and values hold.
func pageBytes(kvs []*mvccpb.KeyValue) int {
	n := 0
	for _, kv := range kvs {
		n += len(kv.Key) + len(kv.Value)
	}
	return n
}
