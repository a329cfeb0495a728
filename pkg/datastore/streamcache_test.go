package datastore

import (
	"errors"
	"iter"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestMergeChanges: the changes a catching-up stream saw, applied to the
// loaded cache: replaced, deleted, new keys before, between and after;
// the result in key order.
func TestMergeChanges(t *testing.T) {
	k := func(key, val string) *mvccpb.KeyValue { return &mvccpb.KeyValue{Key: []byte(key), Value: []byte(val)} }
	base := []*mvccpb.KeyValue{k("b", "1"), k("d", "1"), k("f", "1")}
	changes := map[string]*clientv3.Event{
		"a": {Type: clientv3.EventTypePut, Kv: k("a", "2")},
		"d": {Type: clientv3.EventTypeDelete, Kv: k("d", "")},
		"e": {Type: clientv3.EventTypePut, Kv: k("e", "2")},
		"f": {Type: clientv3.EventTypePut, Kv: k("f", "2")},
		"g": {Type: clientv3.EventTypePut, Kv: k("g", "2")},
		"x": {Type: clientv3.EventTypeDelete, Kv: k("x", "")}, // never there
	}
	var got []string
	for kv, err := range mergeChanges(seqOf(base, nil), changes) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(kv.Key)+"="+string(kv.Value))
	}
	if g, w := strings.Join(got, " "), "a=2 b=1 e=2 f=2 g=2"; g != w {
		t.Fatalf("got %s, want %s", g, w)
	}

	// A base out of key order, or one that fails to read, ends in an
	// error: nothing of it may be delivered as a list.
	for name, base := range map[string]iter.Seq2[*mvccpb.KeyValue, error]{
		"out of order": seqOf([]*mvccpb.KeyValue{k("b", "1"), k("a", "1")}, nil),
		"duplicate":    seqOf([]*mvccpb.KeyValue{k("b", "1"), k("b", "1")}, nil),
		"unreadable":   seqOf([]*mvccpb.KeyValue{k("b", "1")}, errors.New("checksum")),
	} {
		var last error
		for _, err := range mergeChanges(base, changes) {
			last = err
		}
		if last == nil {
			t.Errorf("%s: merged without an error", name)
		}
	}
}

// seqOf yields kvs, then err when not nil.
func seqOf(kvs []*mvccpb.KeyValue, err error) iter.Seq2[*mvccpb.KeyValue, error] {
	return func(yield func(*mvccpb.KeyValue, error) bool) {
		for _, kv := range kvs {
			if !yield(kv, nil) {
				return
			}
		}
		if err != nil {
			yield(nil, err)
		}
	}
}
