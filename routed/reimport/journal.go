package reimport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/routed-net/routed/internal/atomicfile"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// JournalKinds are the kinds a Journal consumes from the node feed.
var JournalKinds = []api.Kind{api.KindWorkloadEndpoint}

// Journal keeps this node's endpoints, as the node last trusted them, in
// a file in its state directory, so that a routed started while the
// datastore cannot be trusted (restored from a snapshot) still knows
// which pods the node runs and can put them back.
//
// It is a node feed consumer: the feed delivers nothing while the node
// holds, so the file only ever holds a view of a trusted datastore. The
// file is rewritten (atomically, 0600) after each change, off the feed's
// path; changes that arrive while a write runs go out in the next one.
type Journal struct {
	path string
	node string
	guid func() string

	mu    sync.Mutex
	weps  map[string]*api.WorkloadEndpoint
	rev   int64
	dirty chan struct{}

	// saved is what an earlier routed wrote (Load), nil when nothing
	// usable was there.
	saved []*api.WorkloadEndpoint
}

// journalFile is the file's content.
type journalFile struct {
	// ClusterGUID is the identity of the datastore the view comes from.
	ClusterGUID string                  `json:"clusterGUID"`
	Revision    int64                   `json:"revision"`
	SavedAt     time.Time               `json:"savedAt"`
	Endpoints   []*api.WorkloadEndpoint `json:"endpoints"`
}

// NewJournal returns a Journal of node's endpoints kept in path; guid
// returns the identity of the datastore the node trusts (written with
// the view).
func NewJournal(path, node string, guid func() string) *Journal {
	return &Journal{path: path, node: node, guid: guid, weps: map[string]*api.WorkloadEndpoint{}, dirty: make(chan struct{}, 1)}
}

// Load reads what an earlier routed saved and keeps it when it comes
// from the datastore whose identity is guid (the one this node
// remembers). It returns how many endpoints it kept; a missing file is
// 0 and no error.
func (j *Journal) Load(guid string) (int, error) {
	b, err := os.ReadFile(j.path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("the saved view of this node's endpoints: %w", err)
	}
	var f journalFile
	if err := json.Unmarshal(b, &f); err != nil {
		return 0, fmt.Errorf("the saved view of this node's endpoints (%s): %w", j.path, err)
	}
	if f.ClusterGUID != guid {
		return 0, fmt.Errorf("the saved view of this node's endpoints (%s) is of another datastore (identity %q, this node's is %q): not used",
			j.path, f.ClusterGUID, guid)
	}
	kept := make([]*api.WorkloadEndpoint, 0, len(f.Endpoints))
	for _, w := range f.Endpoints {
		if w != nil && w.Spec.Node == j.node {
			kept = append(kept, w)
		}
	}
	j.mu.Lock()
	j.saved = kept
	j.mu.Unlock()
	log.WithField("endpoints", len(kept)).WithField("savedAt", f.SavedAt.UTC().Format(time.RFC3339)).
		WithField("revision", f.Revision).Info("loaded the saved view of this node's endpoints")
	return len(kept), nil
}

// Saved returns the view an earlier routed saved (Load), and whether
// there is one.
func (j *Journal) Saved() ([]*api.WorkloadEndpoint, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.saved, j.saved != nil
}

// OnBatch keeps this node's endpoints (feed.Consumer).
func (j *Journal) OnBatch(b feed.Batch) {
	j.mu.Lock()
	if b.Snapshot {
		j.weps = map[string]*api.WorkloadEndpoint{}
	}
	for _, u := range b.Updates {
		if u.Kind != api.KindWorkloadEndpoint {
			continue
		}
		w, ok := u.Resource.(*api.WorkloadEndpoint)
		if u.Deleted || !ok || w.Spec.Node != j.node {
			delete(j.weps, u.Name)
			continue
		}
		j.weps[u.Name] = w
	}
	j.rev = b.Revision
	j.mu.Unlock()
	select {
	case j.dirty <- struct{}{}:
	default:
	}
}

// Run writes the file after each change until ctx ends, and once more
// then if a change is unwritten.
func (j *Journal) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			select {
			case <-j.dirty:
				j.write()
			default:
			}
			return nil
		case <-j.dirty:
			j.write()
		}
	}
}

func (j *Journal) write() {
	j.mu.Lock()
	f := journalFile{ClusterGUID: j.guid(), Revision: j.rev, SavedAt: time.Now().UTC(),
		Endpoints: make([]*api.WorkloadEndpoint, 0, len(j.weps))}
	for _, w := range j.weps {
		f.Endpoints = append(f.Endpoints, w)
	}
	j.mu.Unlock()
	sort.Slice(f.Endpoints, func(a, b int) bool { return f.Endpoints[a].Metadata.Name < f.Endpoints[b].Metadata.Name })
	err := os.MkdirAll(filepath.Dir(j.path), 0o755)
	if err == nil {
		err = atomicfile.Replace(j.path, 0o600, func(w io.Writer) error { return json.NewEncoder(w).Encode(f) })
	}
	if err != nil {
		log.WithError(err).Warn("cannot save this node's endpoints: a routed restarted while the datastore is restored would not know them")
	}
}
