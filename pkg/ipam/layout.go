package ipam

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/datastore"
)

// layoutCurrent is the value of layoutKey once every block is stored in
// layout 2 (whole under blockPrefix, summarised under summaryPrefix).
const layoutCurrent = "2"

// ErrOldLayout is what a read-only operation (ReadOnly: routedctl
// ipam show or check, a dry run) gets from a datastore whose blocks are
// still stored as a routed before layout 2 stored them: it must not
// move them under older nodes, and cannot read them.
var ErrOldLayout = errors.New("ipam: the blocks are stored in the layout of a routed before this one; the first routed node of this version moves them when it starts, as does any IPAM write such as routedctl ipam gc (docs/datastore.md)")

type readOnlyKey struct{}

// ReadOnly marks ctx as an operator's read-only operation (routedctl
// ipam show, check, a dry run): on a datastore in the old layout it
// fails with ErrOldLayout instead of moving it (ensureLayout). Every
// other operation moves it, reads included: a routed node's re-import,
// a CNI DEL's first read, node GC's read of the blocks' owners.
func ReadOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, readOnlyKey{}, true)
}

func moving(ctx context.Context) bool { v, _ := ctx.Value(readOnlyKey{}).(bool); return !v }

// ensureLayout makes sure that the datastore's blocks are in layout 2
// before the Client reads or writes one: it reads layoutKey, and if it
// is absent moves every block a routed older than layout 2 stored whole
// under summaryPrefix (moveLegacy), then sets it; an operation marked
// ReadOnly gets ErrOldLayout instead (where there is any such block).
// Once seen, the marker is checked again by every readMany (a datastore
// restored from a backup older than the move is moved again).
// Moving is idempotent and safe to run from several processes at once
// (each block moves in one transaction conditional on its revision).
// A routed older than layout 2 that meets a summary refuses it as a
// corrupt block (it has no per-address arrays), so during an upgrade
// such nodes fail their pods' allocations, saying so, until upgraded.
func (c *Client) ensureLayout(ctx context.Context) error {
	if c.layoutOK.Load() {
		return nil
	}
	c.layoutMu.Lock()
	defer c.layoutMu.Unlock()
	if c.layoutOK.Load() {
		return nil
	}
	rctx, cancel := c.ds.Ctx(ctx)
	resp, err := c.kv.Get(rctx, layoutKey)
	cancel()
	c.stats.gets.Add(1)
	if err != nil {
		return c.ds.Wrap(err)
	}
	if len(resp.Kvs) > 0 {
		if v := string(resp.Kvs[0].Value); v != layoutCurrent {
			return fmt.Errorf("%w: %s is %q: the blocks are stored in a layout this routed does not know (a newer routed's?)", ErrCorrupt, layoutKey, v)
		}
		c.layoutOK.Store(true)
		return nil
	}
	if !moving(ctx) {
		// A read: fine where there is nothing stored the old way (a new
		// datastore, before its first write sets the marker).
		rctx, cancel := c.ds.Ctx(ctx)
		resp, err := c.kv.Get(rctx, summaryPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
		cancel()
		c.stats.gets.Add(1)
		if err != nil {
			return c.ds.Wrap(err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		return ErrOldLayout
	}
	n, err := c.moveLegacy(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := c.ds.Ctx(ctx)
	defer cancel()
	c.stats.txns.Add(1)
	// Set once; a value another process set meanwhile (the same, or
	// one this routed does not know) is not overwritten.
	tr, err := c.kv.Txn(wctx).If(clientv3.Compare(clientv3.CreateRevision(layoutKey), "=", 0)).
		Then(clientv3.OpPut(layoutKey, layoutCurrent)).Else(clientv3.OpGet(layoutKey)).Commit()
	if err != nil {
		return layoutErr(c.ds.Wrap(err))
	}
	if !tr.Succeeded {
		if kv := firstKV(tr.Responses[0].GetResponseRange().Kvs); kv == nil || string(kv.Value) != layoutCurrent {
			var v []byte
			if kv != nil {
				v = kv.Value
			}
			return fmt.Errorf("%w: %s was set meanwhile to %q, a layout this routed does not know", ErrCorrupt, layoutKey, v)
		}
	}
	log.WithField("blocks", n).Info("IPAM blocks are stored in layout 2 (whole blocks outside the watched prefix, summaries inside)")
	c.layoutOK.Store(true)
	return nil
}

// moveLegacy moves every block stored whole under summaryPrefix (by a
// routed older than layout 2) to blockPrefix, leaving its summary in its
// place, and returns how many it moved. A value there that is neither a
// summary nor a block is left alone (Check reports it).
func (c *Client) moveLegacy(ctx context.Context) (int, error) {
	moved := 0
	var legacy []*mvccpbKV
	_, err := c.ds.Pages(ctx, summaryPrefix, 0, blockPage, func(kvs []*mvccpbKV) error {
		c.stats.gets.Add(1)
		for _, kv := range kvs {
			if !isSummary(kv.Value) {
				legacy = append(legacy, kv)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("ipam: reading %s: %w", summaryPrefix, err)
	}
	for _, kv := range legacy {
		ok, err := c.moveBlock(ctx, kv)
		if errors.Is(err, ErrCorrupt) {
			// One record to repair by hand (Check reports it): the
			// others move, and IPAM goes on.
			log.WithError(err).Warn("IPAM: a block stored the old way cannot be moved")
			continue
		}
		if err != nil {
			return moved, err
		}
		if ok {
			moved++
		}
	}
	return moved, nil
}

// moveBlock moves one block stored whole at kv (a summaryPrefix key),
// retrying on the current value when a writer got there first; it
// reports whether it moved it.
func (c *Client) moveBlock(ctx context.Context, kv *mvccpbKV) (bool, error) {
	skey := string(kv.Key)
	for kv != nil && !isSummary(kv.Value) {
		b, err := decodeBlock(kv.Value)
		if err == nil {
			err = keyMatches(skey, b)
		}
		if err != nil {
			log.WithError(err).WithField("key", skey).Warn("IPAM: a record under the blocks' prefix is neither a block nor a summary; left as is (routedctl ipam check reports it)")
			return false, nil
		}
		sum, err := summarize(kv.Value)
		if err != nil {
			return false, err
		}
		bkey := blockKey(b.prefix)
		// Fenced like every other write of this Client: a deposed GC
		// leader, or a pass begun before the datastore was restored or
		// marked not ready, moves nothing.
		fences := c.fences(ctx)
		cmps, els := fenced(fences,
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(skey), "=", kv.ModRevision), clientv3.Compare(clientv3.CreateRevision(bkey), "=", 0)},
			[]clientv3.Op{clientv3.OpGet(skey), clientv3.OpGet(bkey)})
		tctx, cancel := c.ds.Ctx(ctx)
		c.stats.txns.Add(1)
		resp, err := c.kv.Txn(tctx).If(cmps...).
			Then(clientv3.OpPut(bkey, string(kv.Value)), clientv3.OpPut(skey, string(sum))).
			Else(els...).Commit()
		cancel()
		if err != nil {
			return false, layoutErr(c.ds.Wrap(err))
		}
		if resp.Succeeded {
			return true, nil
		}
		if err := checkFences(fences, resp.Responses[2:]); err != nil {
			return false, fmt.Errorf("ipam: moving block %s to layout 2: %w", b.CIDR, err)
		}
		cur, moved := firstKV(resp.Responses[0].GetResponseRange().Kvs), firstKV(resp.Responses[1].GetResponseRange().Kvs)
		if moved != nil && cur != nil && !isSummary(cur.Value) {
			return false, fmt.Errorf("%w: block %s is stored both whole at %s and at %s: compare them, keep the right one (routedctl ipam check)", ErrCorrupt, b.CIDR, skey, bkey)
		}
		kv = cur
	}
	return false, nil
}

// layoutErr explains a refusal to write the blocks' new prefix: etcd
// roles made before layout 2 lack it.
func layoutErr(err error) error {
	if errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
		return fmt.Errorf("ipam: moving the blocks to layout 2: %w: this etcd identity may not write %s, where the blocks are stored now; grant routed's roles read-write on it (routed print-etcd-roles prints the commands)", err, datastore.IPAMDataPrefix)
	}
	return err
}

// orphanSummaryError: a block's summary is stored without the block (a
// hand edit, a partial restore: never written so by routed, which
// writes both in one transaction). The cidr cannot be claimed until
// an operator repairs it; a claim of any block moves on to another.
type orphanSummaryError struct{ skey, bkey string }

func (e *orphanSummaryError) Error() string {
	return fmt.Sprintf("%v: block summary %s has no block at %s (routedctl ipam check)", ErrCorrupt, e.skey, e.bkey)
}

func (e *orphanSummaryError) Unwrap() error { return ErrCorrupt }

// moveStray is for a block that could not be created because something
// is stored at its summary's key: a block stored whole there by a
// routed before layout 2 after the others moved (an older node's claim
// during the upgrade). It moves it and returns the block as now stored
// (nil: gone meanwhile); a summary without its block is an error.
func (c *Client) moveStray(ctx context.Context, bkey string) (*mvccpbKV, error) {
	skey := summaryKeyOf(bkey)
	for range 5 {
		resp, err := c.readMany(ctx, clientv3.OpGet(skey), clientv3.OpGet(bkey))
		if err != nil {
			return nil, err
		}
		kv, whole := firstKV(resp.Responses[0].GetResponseRange().Kvs), firstKV(resp.Responses[1].GetResponseRange().Kvs)
		switch {
		case whole != nil:
			return whole, nil
		case kv == nil:
			return nil, nil
		case isSummary(kv.Value):
			return nil, &orphanSummaryError{skey: skey, bkey: bkey}
		}
		moved, err := c.moveBlock(ctx, kv)
		if err != nil {
			return nil, err
		}
		if !moved {
			return nil, fmt.Errorf("%w: %s holds neither a block nor a block's summary (routedctl ipam check)", ErrCorrupt, skey)
		}
	}
	return nil, fmt.Errorf("%w: the block stored whole at %s keeps changing under the move", ErrContention, skey)
}

// checkPinned fails a read of the blocks pinned to rev (a revision the
// caller read elsewhere) when the blocks moved to layout 2 after it and
// anything was stored under summaryPrefix at rev: at rev the blocks were
// not, or not all, where they are read now. It moves an old layout
// first (get reads the marker).
func (c *Client) checkPinned(ctx context.Context, rev int64) error {
	resp, err := c.get(ctx, layoutKey)
	if err != nil {
		return err
	}
	if kv := firstKV(resp.Kvs); kv == nil || kv.ModRevision <= rev {
		return nil
	}
	rctx, cancel := c.ds.Ctx(ctx)
	old, err := c.kv.Get(rctx, summaryPrefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithCountOnly())
	cancel()
	c.stats.gets.Add(1)
	if err != nil {
		return c.ds.Wrap(err)
	}
	if old.Count > 0 {
		return fmt.Errorf("%w: the blocks moved to layout 2 after revision %d, which the read is pinned to: read again", datastore.ErrConflict, rev)
	}
	return nil
}
