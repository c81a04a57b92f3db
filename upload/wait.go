package upload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/models"
)

// MaxWait bounds how long one WaitStatus call holds a request open.
const MaxWait = 60 * time.Second

// waitPoll is how often a waiting call rereads the upload's state, for a
// merge that runs on another replica; a merge on this one wakes it at once,
// and while it runs the waiting call reads nothing.
const waitPoll = 100 * time.Millisecond

// notifier wakes waiting calls when an upload leaves pending or merging on
// this replica, and knows which uploads this replica is merging. Entries
// live only while someone waits or merges.
type notifier struct {
	mu      sync.Mutex
	waiters map[string]*waiter
	merging map[string]int // upload id → merges of it running here
}

type waiter struct {
	ch   chan struct{}
	refs int
}

func newNotifier() *notifier {
	return &notifier{waiters: map[string]*waiter{}, merging: map[string]int{}}
}

// wait returns a channel closed at the next done(id), and a release to
// call when the caller stops waiting.
func (n *notifier) wait(id string) (<-chan struct{}, func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w, ok := n.waiters[id]
	if !ok {
		w = &waiter{ch: make(chan struct{})}
		n.waiters[id] = w
	}
	w.refs++
	return w.ch, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if w.refs--; w.refs == 0 && n.waiters[id] == w {
			delete(n.waiters, id)
		}
	}
}

func (n *notifier) done(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.wakeLocked(id)
}

func (n *notifier) wakeLocked(id string) {
	if w, ok := n.waiters[id]; ok {
		close(w.ch)
		delete(n.waiters, id)
	}
}

// merge marks upload id as being merged here until the returned end is
// called. Its end wakes the waiting calls: a merge that recorded an
// outcome woke them already, and one that stopped without (an error the
// runner retries, maybe on another replica) must hand them back to
// polling.
func (n *notifier) merge(id string) (end func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.merging[id]++
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.merging[id]--; n.merging[id] <= 0 {
			delete(n.merging, id)
		}
		n.wakeLocked(id)
	}
}

// mergingHere reports whether this replica is merging upload id: its end
// will wake the waiting calls, so they need not read the database.
func (n *notifier) mergingHere(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.merging[id] > 0
}

// settling states change without the client doing anything.
func settling(state string) bool { return state == StatePending || state == StateMerging }

// WaitStatus is Status, held open for up to wait (at most MaxWait, or the
// answer is invalid_wait) while
// the upload is pending or merging, and answered as soon as it leaves
// those states: a client learns that its upload succeeded within a poll
// interval of the merge, without polling itself.
func (s *Service) WaitStatus(ctx context.Context, userID, id string, wait time.Duration) (Status, error) {
	if wait < 0 || wait > MaxWait {
		return Status{}, errkind.Invalidf("invalid_wait", "wait must be a duration such as 30s, at most %s", MaxWait)
	}
	if wait == 0 {
		return s.Status(ctx, userID, id)
	}
	u, err := s.load(ctx, userID, id)
	if err != nil || !settling(u.State) {
		if err != nil {
			return Status{}, err
		}
		return s.status(ctx, u)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()
	for {
		woke, release := s.changes.wait(id)
		select {
		case <-ctx.Done():
			release()
			return Status{}, ctx.Err()
		case <-timer.C:
			release()
			return s.Status(ctx, userID, id)
		case <-woke:
		case <-tick.C:
			if s.changes.mergingHere(id) {
				release()
				continue
			}
		}
		release()
		var state string
		err := s.db.WithContext(ctx).Model(&models.Upload{}).Where("id = ?", id).Pluck("state", &state).Error
		if errors.Is(err, gorm.ErrRecordNotFound) || (err == nil && state == "") {
			return Status{}, errNotFound
		}
		if err != nil {
			return Status{}, fmt.Errorf("upload: wait: %w", err)
		}
		if !settling(state) {
			return s.Status(ctx, userID, id)
		}
	}
}
