package export

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/s3store"
)

// NondeterministicError means a shard regenerated to bytes other than the
// ones recorded for it. The export fails for good: a rerun could not be
// byte-identical.
type NondeterministicError struct {
	Shard          int
	Recorded, Got  string // SHA-256 hex
	RecordedMsgs   int
	GotMsgs        int
	messagesDiffer bool
}

func (e *NondeterministicError) Error() string {
	if e.messagesDiffer {
		return fmt.Sprintf("shard %d regenerated with %d messages, the plan recorded %d: the snapshot changed under the export", e.Shard, e.GotMsgs, e.RecordedMsgs)
	}
	return fmt.Sprintf("shard %d regenerated to different bytes (sha256 %s, recorded %s): the export is not deterministic", e.Shard, e.Got, e.Recorded)
}

// errShardChanged means a verified shard changed in the bucket while the
// artifact was being assembled; the next run rewrites it.
var errShardChanged = errors.New("export: a shard changed in the bucket during assembly")

// Run is the jobs handler for one export. It is idempotent: every step
// either finds its result already recorded and verified, or redoes it.
func (s *Service) Run(ctx context.Context, j *jobs.Job) error {
	start := time.Now()
	e, err := s.load(ctx, s.db, j.Key)
	if errors.Is(err, ErrNotFound) {
		return jobs.Permanent(err)
	}
	if err != nil {
		return err
	}
	switch e.State {
	case StateDone, StateFailed, StateExpired:
		return nil
	case StateRevoked:
		// Revoked while queued or mid-run: whatever an earlier run left in
		// the bucket goes.
		s.purge(ctx, e.ID)
		return nil
	}
	now := s.now()
	res := s.db.WithContext(ctx).Model(&models.Export{}).
		Where("id = ? AND state IN ?", e.ID, []string{StateQueued, StateRunning}).
		Updates(map[string]any{"state": StateRunning, "runs": gorm.Expr("runs + 1"), "started_at": gorm.Expr("COALESCE(started_at, ?)", now), "updated_at": now})
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return nil // revoked just now; the next sweep cleans up
	}
	if e.Runs > 0 {
		s.metrics.reruns.Inc()
	}
	log := s.log.With("export_id", e.ID, "run", e.Runs+1, "attempt", j.Attempt)
	st := &runStats{}
	err = s.run(ctx, j, e, st, log)
	s.metrics.runDuration.Observe(time.Since(start).Seconds())
	s.metrics.runShards.WithLabelValues(shardWritten).Observe(float64(st.written))
	s.metrics.runShards.WithLabelValues(shardRewritten).Observe(float64(st.rewritten))
	s.metrics.runShards.WithLabelValues(shardSkipped).Observe(float64(st.skipped))
	log.InfoContext(ctx, "export run ended", "shards_written", st.written, "shards_rewritten", st.rewritten,
		"shards_skipped", st.skipped, "elapsed", time.Since(start), "err", err)
	if err == nil || errors.Is(err, jobs.ErrLeaseLost) || ctx.Err() != nil {
		return err
	}
	var nd *NondeterministicError
	if errors.As(err, &nd) || j.Attempt >= j.MaxAttempts {
		reason := "the export could not be completed; the operators have the details"
		if nd != nil {
			reason = nd.Error()
		}
		if ferr := s.fail(ctx, j, e, reason); ferr != nil {
			return ferr
		}
		return jobs.Permanent(err)
	}
	return err
}

type runStats struct{ written, rewritten, skipped int }

func (s *Service) run(ctx context.Context, j *jobs.Job, e models.Export, st *runStats, log *slog.Logger) error {
	count, err := s.plan(ctx, j, e)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if err := s.writeShards(ctx, e, st, log); err != nil {
		return err
	}
	sum, size, err := s.assemble(ctx, e, count)
	if err != nil {
		return fmt.Errorf("assemble: %w", err)
	}
	return s.finish(ctx, j, e, sum, size)
}

// plan persists the shard plan unless an earlier run did, and returns the
// shard count. Each transaction checks the job's fence, so a stale worker
// cannot write a plan beside the current one.
func (s *Service) plan(ctx context.Context, j *jobs.Job, e models.Export) (int, error) {
	if e.ShardCount != nil {
		return *e.ShardCount, nil
	}
	perms, err := s.permissions(ctx, e.ID)
	if err != nil {
		return 0, err
	}
	// Rows of a plan an earlier run did not finish writing.
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := j.Check(ctx, tx); err != nil {
			return err
		}
		return tx.Where("export_id = ?", e.ID).Delete(&models.ExportShard{}).Error
	})
	if err != nil {
		return 0, err
	}
	n, total := 0, int64(0)
	for _, c := range perms {
		// One conversation's plan at a time: memory grows with the
		// largest conversation's shard count, not the export's size.
		var shards []models.ExportShard
		cur := models.ExportShard{ExportID: e.ID, ConversationID: c.Conversation}
		err := chat.VisibleSeqs(ctx, s.db, chat.Range{Conversation: c.Conversation, Intervals: c.Intervals, AsOf: e.SnapshotGseq}, func(seq int64) error {
			if cur.Messages == 0 {
				cur.FirstSeq = seq
			}
			cur.LastSeq = seq
			cur.Messages++
			if cur.Messages == s.opts.ShardSize {
				cur.N = n
				shards = append(shards, cur)
				n++
				cur = models.ExportShard{ExportID: e.ID, ConversationID: c.Conversation}
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		if cur.Messages > 0 {
			cur.N = n
			shards = append(shards, cur)
			n++
		}
		for _, sh := range shards {
			total += int64(sh.Messages)
		}
		if len(shards) == 0 {
			continue
		}
		err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := j.Check(ctx, tx); err != nil {
				return err
			}
			return tx.CreateInBatches(shards, 500).Error
		})
		if err != nil {
			return 0, err
		}
	}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := j.Check(ctx, tx); err != nil {
			return err
		}
		return tx.Model(&models.Export{}).Where("id = ? AND shard_count IS NULL", e.ID).
			Updates(map[string]any{"shard_count": n, "message_count": total, "updated_at": s.now()}).Error
	})
	if err != nil {
		return 0, err
	}
	s.log.InfoContext(ctx, "export planned", "export_id", e.ID, "shards", n, "messages", total, "conversations", len(perms))
	return n, nil
}

// permissions loads an export's permission snapshot, grouped by
// conversation in id order.
func (s *Service) permissions(ctx context.Context, id string) ([]chat.ConversationIntervals, error) {
	var rows []models.ExportPermission
	if err := s.db.WithContext(ctx).Where("export_id = ?", id).Order("conversation_id, join_gseq").Find(&rows).Error; err != nil {
		return nil, err
	}
	var out []chat.ConversationIntervals
	for _, r := range rows {
		iv := chat.Interval{Join: r.JoinGseq}
		if r.LeaveGseq != nil {
			iv.Leave = *r.LeaveGseq
		}
		if n := len(out); n == 0 || out[n-1].Conversation != r.ConversationID {
			out = append(out, chat.ConversationIntervals{Conversation: r.ConversationID})
		}
		out[len(out)-1].Intervals = append(out[len(out)-1].Intervals, iv)
	}
	return out, nil
}

// eachShard calls fn for every shard of the plan in order, reading the
// plan a page at a time.
func (s *Service) eachShard(ctx context.Context, id string, fn func(models.ExportShard) error) error {
	const page = 500
	for next := 0; ; {
		var shards []models.ExportShard
		if err := s.db.WithContext(ctx).Where("export_id = ? AND n >= ?", id, next).Order("n").Limit(page).Find(&shards).Error; err != nil {
			return err
		}
		for _, sh := range shards {
			if err := fn(sh); err != nil {
				return err
			}
		}
		if len(shards) < page {
			return nil
		}
		next = shards[len(shards)-1].N + 1
	}
}

// Shard results, as counted in metrics and logs.
const (
	shardSkipped   = "skipped"   // verified in the bucket as recorded
	shardWritten   = "written"   // put for the first time, or after it went missing
	shardRewritten = "rewritten" // found altered in the bucket and put again
)

// Window bounds: shards are prepared a window at a time so their hashes
// are recorded in one transaction, and memory stays bounded by the bytes
// limit whatever the shard size.
const (
	windowShards = 32
	windowBytes  = 4 << 20
)

// pendingShard is a shard of the current window on its way to the bucket.
type pendingShard struct {
	sh     models.ExportShard
	result string
	data   []byte // nil when skipped
	sum    string
	record bool // sum is new: record it before the put
}

// writeShards makes every shard of the plan exist in the bucket with its
// recorded bytes, in plan order.
func (s *Service) writeShards(ctx context.Context, e models.Export, st *runStats, log *slog.Logger) error {
	gen := &generator{s: s, e: e}
	var window []pendingShard
	buffered := 0
	flush := func() error {
		if err := s.record(ctx, e.ID, window); err != nil {
			return err
		}
		for _, p := range window {
			if p.data != nil {
				if err := s.store.Put(ctx, shardKey(e.ID, p.sh.N), bytes.NewReader(p.data), int64(len(p.data)), "application/x-ndjson"); err != nil {
					return err
				}
				if h := s.opts.Hooks.ShardWritten; h != nil {
					h(e.ID, p.sh.N)
				}
			}
			s.metrics.shards.WithLabelValues(p.result).Inc()
			switch p.result {
			case shardWritten:
				st.written++
			case shardRewritten:
				st.rewritten++
				log.WarnContext(ctx, "export shard rewritten", "shard", p.sh.N)
			default:
				st.skipped++
			}
			if h := s.opts.Hooks.AfterShard; h != nil {
				if err := h(e.ID, p.sh.N); err != nil {
					return err
				}
			}
		}
		window, buffered = window[:0], 0
		return nil
	}
	err := s.eachShard(ctx, e.ID, func(sh models.ExportShard) error {
		p, err := s.prepare(ctx, gen, e, sh)
		if err != nil {
			return err
		}
		window = append(window, p)
		buffered += len(p.data)
		if len(window) >= windowShards || buffered >= windowBytes {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// prepare verifies a recorded shard against its object, and otherwise
// renders it. A shard that renders to other bytes than recorded is a
// NondeterministicError.
func (s *Service) prepare(ctx context.Context, gen *generator, e models.Export, sh models.ExportShard) (pendingShard, error) {
	p := pendingShard{sh: sh, result: shardWritten}
	if sh.SHA256 != nil {
		state, err := s.verify(ctx, shardKey(e.ID, sh.N), *sh.SHA256)
		if err != nil {
			return p, err
		}
		switch state {
		case objectVerified:
			p.result = shardSkipped
			return p, nil
		case objectAltered:
			p.result = shardRewritten
		}
	}
	b, err := gen.shard(ctx, sh)
	if err != nil {
		return p, err
	}
	sum := sha256.Sum256(b)
	p.data, p.sum = b, hex.EncodeToString(sum[:])
	if sh.SHA256 != nil && *sh.SHA256 != p.sum {
		return p, &NondeterministicError{Shard: sh.N, Recorded: *sh.SHA256, Got: p.sum}
	}
	p.record = sh.SHA256 == nil
	return p, nil
}

// record stores the new hashes of a window in one transaction, before any
// of its objects is put: a crash in between leaves records whose objects
// are missing, which the next run regenerates and compares, so every
// object ever written is checked against one recorded hash.
func (s *Service) record(ctx context.Context, id string, window []pendingShard) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for _, p := range window {
			if !p.record {
				continue
			}
			res := tx.Model(&models.ExportShard{}).Where("export_id = ? AND n = ? AND sha256 IS NULL", id, p.sh.N).
				Updates(map[string]any{"sha256": p.sum, "bytes": len(p.data)})
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 1 {
				continue
			}
			// A stale worker recorded it meanwhile: it must agree.
			var rec models.ExportShard
			if err := tx.Where("export_id = ? AND n = ?", id, p.sh.N).Take(&rec).Error; err != nil {
				return err
			}
			if rec.SHA256 == nil || *rec.SHA256 != p.sum {
				return &NondeterministicError{Shard: p.sh.N, Recorded: deref(rec.SHA256), Got: p.sum}
			}
		}
		return nil
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Object states as verify finds them.
const (
	objectVerified = iota
	objectMissing
	objectAltered
)

// verify reads the object at key and compares its hash with want.
func (s *Service) verify(ctx context.Context, key, want string) (int, error) {
	rc, err := s.store.Get(ctx, key)
	if errors.Is(err, s3store.ErrNotFound) {
		return objectMissing, nil
	}
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return 0, err
	}
	if hex.EncodeToString(h.Sum(nil)) != want {
		return objectAltered, nil
	}
	return objectVerified, nil
}

// line is one message of the artifact. Fields are declared in key order,
// so encoding/json writes the keys sorted.
type line struct {
	Attachments []string `json:"attachments"`
	Body        string   `json:"body"`
	Conv        string   `json:"conv"`
	Gseq        int64    `json:"gseq"`
	Recalled    bool     `json:"recalled"`
	Sender      string   `json:"sender"`
	SentAt      string   `json:"sent_at"`
	Seq         int64    `json:"seq"`
}

// sentAtLayout is fixed-width, UTC, microseconds: the stored precision.
const sentAtLayout = "2006-01-02T15:04:05.000000Z"

// generator renders shards; it caches the permission snapshot of the
// conversation it is in.
type generator struct {
	s    *Service
	e    models.Export
	conv string
	ivs  []chat.Interval
}

// shard renders shard sh as JSON Lines. The output depends only on the
// snapshot and the data at or below it, never on the run.
func (g *generator) shard(ctx context.Context, sh models.ExportShard) ([]byte, error) {
	if g.conv != sh.ConversationID {
		var rows []models.ExportPermission
		err := g.s.db.WithContext(ctx).Where("export_id = ? AND conversation_id = ?", g.e.ID, sh.ConversationID).
			Order("join_gseq").Find(&rows).Error
		if err != nil {
			return nil, err
		}
		g.ivs = g.ivs[:0]
		for _, r := range rows {
			iv := chat.Interval{Join: r.JoinGseq}
			if r.LeaveGseq != nil {
				iv.Leave = *r.LeaveGseq
			}
			g.ivs = append(g.ivs, iv)
		}
		g.conv = sh.ConversationID
	}
	msgs, err := chat.ReadMessages(ctx, g.s.db, chat.Range{
		Conversation: sh.ConversationID, Intervals: g.ivs, AsOf: g.e.SnapshotGseq, FromSeq: sh.FirstSeq, ToSeq: sh.LastSeq,
	})
	if err != nil {
		return nil, err
	}
	if len(msgs) != sh.Messages {
		return nil, &NondeterministicError{Shard: sh.N, RecordedMsgs: sh.Messages, GotMsgs: len(msgs), messagesDiffer: true}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, m := range msgs {
		l := line{Attachments: m.Attachments, Body: m.Body, Conv: m.Conversation, Gseq: m.Gseq, Recalled: m.Recalled,
			Sender: m.Sender, SentAt: m.SentAt.UTC().Format(sentAtLayout), Seq: m.Seq}
		if l.Attachments == nil {
			l.Attachments = []string{}
		}
		if err := enc.Encode(l); err != nil {
			return nil, err
		}
	}
	b := buf.Bytes()
	if h := g.s.opts.Hooks.MutateShard; h != nil {
		b = h(g.e.ID, sh.N, b)
	}
	return b, nil
}

// assemble streams the shards in order through gzip into the artifact's
// multipart upload, hashing on the way, and returns its SHA-256 and size.
// Memory is the writer's part buffers plus one copy buffer.
func (s *Service) assemble(ctx context.Context, e models.Export, count int) (string, int64, error) {
	// Uploads a killed run left unfinished would linger until the
	// bucket's lifecycle rule; abort them now.
	stale, err := s.store.ListMultipartUploads(ctx, prefix(e.ID))
	if err != nil {
		return "", 0, err
	}
	for _, u := range stale {
		if err := s.store.AbortMultipart(ctx, u.Key, u.UploadID); err != nil {
			return "", 0, err
		}
	}
	w := s.store.NewWriter(ctx, artifactKey(e.ID), "application/gzip", s.opts.PartSize)
	hash := sha256.New()
	counter := &countingWriter{}
	// The zero gzip.Header writes no name, mtime 0 and OS "unknown", so
	// the bytes depend on the content alone.
	zw, err := gzip.NewWriterLevel(io.MultiWriter(w, hash, counter), gzip.DefaultCompression)
	if err != nil {
		return "", 0, err
	}
	// One shard is fetched ahead while the previous one is compressed:
	// at most three shards are in memory at once.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type fetched struct {
		sh   models.ExportShard
		data []byte
	}
	next := make(chan fetched, 1)
	var fetchErr error
	go func() {
		defer close(next)
		fetchErr = s.eachShard(fctx, e.ID, func(sh models.ExportShard) error {
			rc, err := s.store.Get(fctx, shardKey(e.ID, sh.N))
			if err != nil {
				return err
			}
			var buf bytes.Buffer
			if sh.Bytes != nil {
				buf.Grow(int(*sh.Bytes) + bytes.MinRead)
			}
			_, err = buf.ReadFrom(rc)
			rc.Close()
			if err != nil {
				return err
			}
			select {
			case next <- fetched{sh, buf.Bytes()}:
				return nil
			case <-fctx.Done():
				return fctx.Err()
			}
		})
	}()
	seen := 0
	for f := range next {
		sum := sha256.Sum256(f.data)
		switch {
		case f.sh.SHA256 == nil:
			err = fmt.Errorf("shard %d has no recorded hash", f.sh.N)
		case hex.EncodeToString(sum[:]) != *f.sh.SHA256:
			err = fmt.Errorf("shard %d: %w", f.sh.N, errShardChanged)
		default:
			_, err = zw.Write(f.data)
		}
		if err == nil {
			seen++
			if h := s.opts.Hooks.Assembled; h != nil {
				err = h(e.ID, f.sh.N)
			}
		}
		if err != nil {
			cancel()
			for range next { // let the fetcher finish
			}
			break
		}
	}
	if err == nil {
		err = fetchErr // read after next is closed: the fetcher is done
	}
	if err == nil && seen != count {
		err = fmt.Errorf("the plan has %d shards, %d were found", count, seen)
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		w.Abort()
		return "", 0, err
	}
	if err := w.Close(); err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(hash.Sum(nil)), counter.n, nil
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// completedData is the export.completed event's data.
type completedData struct {
	ExportID     string    `json:"export_id"`
	UserID       string    `json:"user_id"`
	Scope        string    `json:"scope"`
	SnapshotGseq int64     `json:"snapshot_gseq"`
	SHA256       string    `json:"sha256"`
	Bytes        int64     `json:"bytes"`
	CreatedAt    time.Time `json:"created_at"`
	FinishedAt   time.Time `json:"finished_at"`
}

// finish records the artifact, the done state and the outbox row, and
// finishes the job, in one fenced transaction.
func (s *Service) finish(ctx context.Context, j *jobs.Job, e models.Export, sum string, size int64) error {
	now := s.now()
	revoked := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&models.Export{}).Where("id = ? AND state = ?", e.ID, StateRunning).Updates(map[string]any{
			"state": StateDone, "artifact_key": artifactKey(e.ID), "sha256": sum, "bytes": size, "error": nil,
			"finished_at": now, "expires_at": now.Add(s.opts.Retention), "updated_at": now,
		})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			revoked = true // revoked while running
			return j.Finish(ctx, tx)
		}
		_, err := notify.Emit(ctx, tx, now, notify.Event{Type: notify.ExportCompleted, Subject: e.ID, UserID: e.UserID, Data: completedData{
			ExportID: e.ID, UserID: e.UserID, Scope: e.Scope, SnapshotGseq: e.SnapshotGseq, SHA256: sum, Bytes: size,
			CreatedAt: e.CreatedAt, FinishedAt: now,
		}})
		if err != nil {
			return err
		}
		return j.Finish(ctx, tx)
	})
	if err != nil {
		return err
	}
	if revoked {
		s.purge(ctx, e.ID)
		return nil
	}
	s.metrics.finished.WithLabelValues(StateDone).Inc()
	s.metrics.duration.Observe(now.Sub(e.CreatedAt).Seconds())
	s.log.InfoContext(ctx, "export done", "export_id", e.ID, "sha256", sum, "bytes", size)
	if s.opts.DeleteShards {
		if _, err := s.store.DeletePrefix(ctx, shardPrefix(e.ID)); err != nil {
			// The retention sweep deletes the whole prefix later anyway.
			s.log.WarnContext(ctx, "export shards not deleted", "export_id", e.ID, "err", err)
		}
	}
	return nil
}

// failedData is the export.failed event's data.
type failedData struct {
	ExportID string `json:"export_id"`
	UserID   string `json:"user_id"`
	Scope    string `json:"scope"`
	Error    string `json:"error"`
}

// fail records the failed state and the outbox row in one transaction,
// fenced on the job (j nil: no job to check, as in the sweep).
func (s *Service) fail(ctx context.Context, j *jobs.Job, e models.Export, reason string) error {
	now := s.now()
	failed := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if j != nil {
			if err := j.Check(ctx, tx); err != nil {
				return err
			}
		}
		res := tx.Model(&models.Export{}).Where("id = ? AND state IN ?", e.ID, []string{StateQueued, StateRunning}).
			Updates(map[string]any{"state": StateFailed, "error": reason, "finished_at": now, "updated_at": now})
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		failed = true
		_, err := notify.Emit(ctx, tx, now, notify.Event{Type: notify.ExportFailed, Subject: e.ID, UserID: e.UserID,
			Data: failedData{ExportID: e.ID, UserID: e.UserID, Scope: e.Scope, Error: reason}})
		return err
	})
	if err == nil && failed {
		s.metrics.finished.WithLabelValues(StateFailed).Inc()
		s.log.ErrorContext(ctx, "export failed", "export_id", e.ID, "reason", reason)
	}
	return err
}

// purge deletes everything an export has in the bucket and notes when.
// Errors are logged: the sweep retries exports whose purge did not finish.
func (s *Service) purge(ctx context.Context, id string) {
	if _, err := s.store.DeletePrefix(ctx, prefix(id)); err != nil {
		s.log.WarnContext(ctx, "export objects not deleted", "export_id", id, "err", err)
		return
	}
	ups, err := s.store.ListMultipartUploads(ctx, prefix(id))
	if err == nil {
		for _, u := range ups {
			s.store.AbortMultipart(ctx, u.Key, u.UploadID)
		}
	}
	s.db.WithContext(ctx).Model(&models.Export{}).Where("id = ? AND state IN ?", id, []string{StateRevoked, StateExpired, StateFailed}).
		Update("purged_at", s.now())
}
