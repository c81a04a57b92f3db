package upload

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/models"
)

// MaxWait bounds how long one WaitStatus call holds a request open.
const MaxWait = 60 * time.Second

// waitPoll is how often the waiting calls of a replica reread the states
// of their uploads, for merges that run on another replica; a merge on
// this one wakes its waiting calls at once, and while it runs nothing is
// read for them.
const waitPoll = 100 * time.Millisecond

// pollBatch is the most uploads one poll reads in a statement.
const pollBatch = 500

// notifier wakes waiting calls when an upload leaves pending or merging,
// and knows which uploads this replica is merging. Entries live only while
// someone waits or merges.
//
// A merge here wakes its upload's waiting calls when it ends. For the
// rest, one poll loop per replica runs while anything waits: every
// waitPoll it reads the states of all the uploads waited on, in one
// statement per pollBatch of them, and wakes the calls of those that
// settled. Each call used to read its own upload's state every waitPoll:
// a thousand calls waiting on a slow merge queue made ten thousand reads a
// second, and a client holding many calls on one upload multiplied its
// cost to the database by their number.
type notifier struct {
	mu      sync.Mutex
	waiters map[string]*waiter
	merging map[string]int // upload id → merges of it running here
	polling bool           // the poll loop runs

	// settled returns the ids among ids whose uploads are no longer
	// settling, or gone.
	settled func(ctx context.Context, ids []string) ([]string, error)
	log     *slog.Logger
}

type waiter struct {
	ch   chan struct{}
	refs int
}

func newNotifier(settled func(ctx context.Context, ids []string) ([]string, error), log *slog.Logger) *notifier {
	return &notifier{waiters: map[string]*waiter{}, merging: map[string]int{}, settled: settled, log: log}
}

// wait returns a channel closed when upload id may have settled: at the
// end of a merge of it here, or when a poll finds it settled (or cannot
// tell: the caller reads the state itself and sees the error). Call
// release when no longer waiting.
func (n *notifier) wait(id string) (<-chan struct{}, func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w, ok := n.waiters[id]
	if !ok {
		w = &waiter{ch: make(chan struct{})}
		n.waiters[id] = w
	}
	w.refs++
	if !n.polling {
		n.polling = true
		go n.poll()
	}
	return w.ch, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if w.refs--; w.refs == 0 && n.waiters[id] == w {
			delete(n.waiters, id)
		}
	}
}

// poll is the poll loop. It stops at the first tick that finds nothing
// waiting; the next wait starts it again.
func (n *notifier) poll() {
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()
	for range tick.C {
		ids, ok := n.polled()
		if !ok {
			return
		}
		for len(ids) > 0 {
			batch := ids[:min(len(ids), pollBatch)]
			ids = ids[len(batch):]
			ctx, cancel := context.WithTimeout(context.Background(), 10*waitPoll)
			settled, err := n.settled(ctx, batch)
			cancel()
			if err != nil {
				n.log.Warn("upload: polling waited-on uploads", "uploads", len(batch), "err", err)
				settled = batch
			}
			n.mu.Lock()
			for _, id := range settled {
				n.wakeLocked(id)
			}
			n.mu.Unlock()
		}
	}
}

// polled returns the uploads to read this tick: those waited on and not
// merging here. It reports false, and marks the loop stopped, when
// nothing waits.
func (n *notifier) polled() ([]string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.waiters) == 0 {
		n.polling = false
		return nil, false
	}
	ids := make([]string, 0, len(n.waiters))
	for id := range n.waiters {
		if n.merging[id] == 0 {
			ids = append(ids, id)
		}
	}
	return ids, true
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
	if st, done, err := s.answer(ctx, userID, id); done {
		return st, err
	}
	s.metrics.waiting.Inc()
	defer s.metrics.waiting.Dec()
	timer := time.NewTimer(wait)
	defer timer.Stop()
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
		}
		release()
		// Woken by a poll, or by a merge here, which may have stopped
		// without an outcome (the runner retries it): answer, or wait
		// again.
		if st, done, err := s.answer(ctx, userID, id); done {
			return st, err
		}
	}
}

// answer reads upload id as userID may see it, as WaitStatus began and
// each time it is woken: done is false while the upload is still pending
// or merging, so the call goes on waiting; otherwise the call answers
// with the status or the error (not found, another user's).
func (s *Service) answer(ctx context.Context, userID, id string) (st Status, done bool, err error) {
	u, err := s.load(ctx, userID, id)
	if err != nil {
		return Status{}, true, err
	}
	if settling(u.State) {
		return Status{}, false, nil
	}
	st, err = s.status(ctx, u)
	return st, true, err
}

// settledUploads returns the ids among ids whose uploads are no longer
// pending or merging, or no longer exist: the notifier's poll.
func (s *Service) settledUploads(ctx context.Context, ids []string) ([]string, error) {
	var rows []struct{ ID, State string }
	if err := s.db.WithContext(ctx).Model(&models.Upload{}).Select("id", "state").Where("id IN ?", ids).Find(&rows).Error; err != nil {
		return nil, err
	}
	still := make(map[string]bool, len(rows))
	for _, r := range rows {
		still[r.ID] = settling(r.State)
	}
	var out []string
	for _, id := range ids {
		if !still[id] {
			out = append(out, id)
		}
	}
	return out, nil
}
