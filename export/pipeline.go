package export

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/s3store"
)

// How a run moves shards. Four stages work at once, joined by channels
// that hold one window (windowShards shards, or about windowBytes) each:
//
//  1. The producer walks the plan in order. A recorded shard is read from
//     the bucket and hashed: it is kept when it matches and regenerated
//     otherwise; an unrecorded one is generated. Shards to generate are
//     read from the database a run of consecutive shards of one
//     conversation at a time (one read for up to genMessages messages, not
//     one per shard), genWorkers reads at once; results are taken in plan
//     order.
//  2. The recorder stores a window's new hashes in one statement, before
//     any of its objects is put (X3: every object ever written is checked
//     against one recorded hash).
//  3. The putter puts a window's new objects, putsInFlight at a time, and
//     then runs the per-shard bookkeeping (hooks, metrics) in plan order.
//     A window's puts all end before the next window's begin, so a crash
//     leaves written shards only in the windows it reached.
//  4. The assembler streams every shard's bytes, in plan order, through
//     gzip into the artifact's multipart upload while hashing. It takes
//     them from memory, so no shard is read back from the bucket.
//
// Memory is bounded by stageBytes of shards between the producer and the
// assembler (or one larger shard alone), genWorkers generation batches
// (read, rendered or waiting for their turn), and the artifact writer's
// two part buffers. Windows alone did not bound it: a message may render
// to about 96 KiB of JSON (16 KiB of control characters, each escaped as
// \u00XX), a shard of such messages is a window of its own, and the
// stages held up to seven windows. Nor did rendering in the generation
// tasks: each held up to genMessages messages' worth of such shards
// until the producer took them. A shard's size is counted from its
// messages (lineLen) before it is rendered; a task renders it only when
// that is at most eagerBytes. A larger one is rendered by the producer
// when its turn comes, after it has taken its share of stageBytes, so
// the budget covers it from its first byte; a recorded shard larger than
// eagerBytes is fetched and checked the same way. Besides its eager
// shards, what a batch holds is its messages, at most genMessages of
// chat.MaxBodyBytes.
//
// On two cores the stages keep both busy; what limits a run there is
// CPU: the S3 server's per PUT (one per shard, hence the default of 1,000
// messages a shard) and per byte (hence encodeShard), the database's per
// read (hence genMessages, a few default shards a read: each read is four
// statements, the membership intervals, the messages, their recalls and
// their attachments) and ferry's own for JSON, gzip, Snappy and SHA-256.
const (
	windowShards = 32
	windowBytes  = 4 << 20
	genMessages  = 4000 // messages one generation read covers, at least one shard's
	genWorkers   = 3
	putsInFlight = 16
	// stageBytes is the most shard bytes the stages after the producer
	// hold at once. Windows of ordinary messages stay under it (at most
	// seven of about 4 MiB: the producer's, three channels' and three
	// stages'), so it binds only when shards are large.
	stageBytes = 32 << 20
)

// eagerBytes is the most bytes of JSON a shard rendered by its
// generation task may take; larger shards are left to the producer. A
// default shard of ordinary messages, 1,000 of a few hundred bytes, is
// far below it, so generation stays parallel.
func (s *Service) eagerBytes() int64 { return s.stageBytes / 8 }

// Shard results, as counted in metrics and logs.
const (
	shardSkipped   = "skipped"   // verified in the bucket as recorded
	shardWritten   = "written"   // put for the first time, or after it went missing
	shardRewritten = "rewritten" // found altered in the bucket and put again
)

// pendingShard is a shard on its way through the stages.
type pendingShard struct {
	sh     models.ExportShard
	result string
	data   []byte // the shard's bytes, always set once produced
	sum    string // their SHA-256 hex
	record bool   // sum is new: record it before the put
	held   int64  // of the run's stageBytes, until it is assembled

	later  int            // what the producer still has to do: nothing, renderLater or checkLater
	msgs   []chat.Message // for renderLater: the shard's messages
	length int64          // for later: the size data will have
}

// Work a task leaves to the producer for a shard too large to make ahead
// (eagerBytes).
const (
	renderLater = 1 + iota // its messages are read: render them
	checkLater             // it is recorded: check the object, regenerate it if need be
)

// build makes every shard of the plan exist in the bucket with its
// recorded bytes and assembles the artifact from them, returning its
// digests and size. The artifact becomes visible only when every stage
// ended well; anything else discards what was written of it.
func (s *Service) build(ctx context.Context, e models.Export, count int, st *runStats, log *slog.Logger) (built, error) {
	// Uploads a killed run left unfinished would linger until the
	// bucket's lifecycle rule; abort them now.
	stale, err := s.store.ListMultipartUploads(ctx, prefix(e.ID))
	if err != nil {
		return built{}, err
	}
	for _, u := range stale {
		if err := s.store.AbortMultipart(ctx, u.Key, u.UploadID); err != nil {
			return built{}, err
		}
	}
	var b built
	size, err := s.store.WriteObject(ctx, artifactKey(e.ID), "application/gzip", s.opts.PartSize, func(w io.Writer) error {
		asm, err := s.newAssembler(e, w)
		if err != nil {
			return err
		}
		if err := s.pipeline(ctx, e, asm, st, log); err != nil {
			return err
		}
		b, err = asm.close(count)
		return err
	})
	if err != nil {
		return built{}, err
	}
	b.size = size
	return b, nil
}

// built is what a run wrote: the artifact's SHA-256 (hex) and CRC32C
// (base64, which the download proxy sends as Repr-Digest), and its size.
type built struct {
	sha256, crc32c string
	size           int64
}

// pipeline runs the four stages until every shard is in asm.
func (s *Service) pipeline(ctx context.Context, e models.Export, asm *assembler, st *runStats, log *slog.Logger) error {
	g, gctx := errgroup.WithContext(ctx)
	held := semaphore.NewWeighted(s.stageBytes)
	produced := make(chan []pendingShard, 1)
	recorded := make(chan []pendingShard, 1)
	stored := make(chan []pendingShard, 1)
	g.Go(func() error {
		defer close(produced)
		return s.produce(gctx, e, held, produced)
	})
	g.Go(func() error {
		defer close(recorded)
		for w := range produced {
			if err := s.record(gctx, e.ID, w); err != nil {
				return err
			}
			if err := send(gctx, recorded, w); err != nil {
				return err
			}
		}
		return nil
	})
	g.Go(func() error {
		defer close(stored)
		for w := range recorded {
			if err := s.putWindow(gctx, e, w, st, log); err != nil {
				return err
			}
			if err := send(gctx, stored, w); err != nil {
				return err
			}
		}
		return nil
	})
	g.Go(func() error {
		for w := range stored {
			for i, p := range w {
				if err := asm.add(p); err != nil {
					return fmt.Errorf("assemble: %w", err)
				}
				held.Release(p.held)
				// Every stage shares the window's array, and the ones
				// before keep it until their next window: let go of the
				// bytes here, with their share of the budget.
				w[i] = pendingShard{}
			}
		}
		return nil
	})
	return g.Wait()
}

// send hands w to the next stage unless the run is ending.
func send(ctx context.Context, ch chan<- []pendingShard, w []pendingShard) error {
	select {
	case ch <- w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// produce walks the plan and sends windows of produced shards.
// Up to genWorkers tasks (a batch to generate, or a recorded shard to
// check) run or wait at once; their results are taken in plan order. Each
// shard takes its size (at most all of it) from held before it joins a
// window, and the assembler gives it back.
func (s *Service) produce(ctx context.Context, e models.Export, held *semaphore.Weighted, out chan<- []pendingShard) error {
	g, gctx := errgroup.WithContext(ctx)
	tasks := make(chan *task, genWorkers)
	// A slot is taken when a task starts and given back when its shards
	// have joined a window, not when it ends: finished tasks waiting for
	// their turn hold their shards too.
	slots := make(chan struct{}, genWorkers)
	g.Go(func() error {
		defer close(tasks)
		return s.schedule(gctx, e, slots, tasks)
	})
	g.Go(func() error {
		var window []pendingShard
		buffered := 0
		flush := func() error {
			if err := send(gctx, out, window); err != nil {
				return err
			}
			window, buffered = nil, 0
			return nil
		}
		for t := range tasks {
			select {
			case <-t.done:
			case <-gctx.Done():
				return gctx.Err()
			}
			if t.err != nil {
				return t.err
			}
			for i, p := range t.shards {
				t.shards[i] = pendingShard{} // the window holds it now
				p.held = min(p.size(), s.stageBytes)
				if !held.TryAcquire(p.held) {
					// Whatever this waits for must be able to reach the
					// assembler: send the shards taken so far first.
					if len(window) > 0 {
						if err := flush(); err != nil {
							return err
						}
					}
					if err := held.Acquire(gctx, p.held); err != nil {
						return err
					}
				}
				if err := s.complete(gctx, e, &p); err != nil {
					return err
				}
				if h := s.hooks.Held; h != nil {
					h(e.ID, p.sh.N, len(p.data))
				}
				window = append(window, p)
				buffered += len(p.data)
				if len(window) >= windowShards || buffered >= windowBytes {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			<-slots
		}
		if len(window) > 0 {
			return flush()
		}
		return nil
	})
	return g.Wait()
}

// task produces one or more consecutive shards of the plan.
type task struct {
	shards []pendingShard
	check  bool // one recorded shard: fetch and verify it, regenerate if need be
	err    error
	done   chan struct{}
}

// schedule walks the plan, sends its tasks in order and starts each once
// it has one of slots, which produce gives back.
func (s *Service) schedule(ctx context.Context, e models.Export, slots chan<- struct{}, tasks chan<- *task) error {
	start := func(t *task) error {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		t.done = make(chan struct{})
		go func() {
			defer close(t.done)
			t.err = s.runTask(ctx, e, t)
		}()
		select {
		case tasks <- t:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var batch []pendingShard // consecutive shards of one conversation to generate
	batched := 0             // their messages
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		t := &task{shards: batch}
		batch, batched = nil, 0
		return start(t)
	}
	err := s.eachShard(ctx, e.ID, func(sh models.ExportShard) error {
		p := pendingShard{sh: sh, result: shardWritten}
		if sh.SHA256 != nil {
			// Tasks are taken in plan order: the batch before this
			// shard goes first.
			if err := flush(); err != nil {
				return err
			}
			return start(&task{shards: []pendingShard{p}, check: true})
		}
		if len(batch) > 0 && (batch[0].sh.ConversationID != sh.ConversationID || batched+sh.Messages > genMessages) {
			if err := flush(); err != nil {
				return err
			}
		}
		batch = append(batch, p)
		batched += sh.Messages
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// runTask fills in t's shards: a recorded shard is checked, a batch is
// generated. Shards too large to make ahead are left to the producer
// (complete).
func (s *Service) runTask(ctx context.Context, e models.Export, t *task) error {
	if !t.check {
		return s.generate(ctx, e, t.shards, true)
	}
	if p := &t.shards[0]; p.sh.Bytes != nil && *p.sh.Bytes > s.eagerBytes() {
		p.later, p.length = checkLater, *p.sh.Bytes // a regenerated shard of another size fails the run
		return nil
	}
	return s.check(ctx, e, t.shards, true)
}

// size is the bytes p holds, or will hold once complete has made it:
// what it takes of stageBytes, before that.
func (p *pendingShard) size() int64 {
	if p.later != 0 {
		return p.length
	}
	return int64(len(p.data))
}

// complete does what p's task left to the producer, if anything.
func (s *Service) complete(ctx context.Context, e models.Export, p *pendingShard) error {
	switch p.later {
	case renderLater:
		msgs := p.msgs
		p.later, p.msgs = 0, nil
		err := s.renderShard(e, p, msgs, int(p.length))
		clear(msgs) // the batch's other shards keep the array: drop the bodies
		return err
	case checkLater:
		p.later = 0
		one := []pendingShard{*p}
		err := s.check(ctx, e, one, false)
		*p = one[0]
		return err
	}
	return nil
}

// check keeps one[0], a recorded shard, when its object matches the
// record, and regenerates it otherwise (see generate for ahead).
func (s *Service) check(ctx context.Context, e models.Export, one []pendingShard, ahead bool) error {
	p := &one[0]
	data, state, err := s.fetch(ctx, shardKey(e.ID, p.sh.N), *p.sh.SHA256, p.sh.Bytes)
	if err != nil {
		return err
	}
	switch state {
	case objectVerified:
		p.result, p.data, p.sum = shardSkipped, data, *p.sh.SHA256
		return nil
	case objectAltered:
		p.result = shardRewritten
	}
	return s.generate(ctx, e, one, ahead)
}

// generate renders batch, consecutive shards of one conversation, from
// one read of their messages. With ahead, a shard whose JSON would exceed
// eagerBytes keeps its messages for the producer to render instead.
func (s *Service) generate(ctx context.Context, e models.Export, batch []pendingShard, ahead bool) error {
	first, last := batch[0].sh, batch[len(batch)-1].sh
	r := chat.Range{Conversation: first.ConversationID, Reader: snapshotReader(e.ID), AsOf: e.SnapshotGseq, FromSeq: first.FirstSeq, ToSeq: last.LastSeq}
	visible := 0
	for _, p := range batch {
		visible += p.sh.Messages
	}
	read := chat.ReadMessages
	if last.LastSeq-first.FirstSeq+1 <= 2*int64(visible) {
		// The plan counted the visible messages: most of the span is
		// visible, so one read of the span is cheaper than a key scan
		// first.
		read = chat.ReadSpan
	}
	msgs, err := read(ctx, s.db, r)
	if err != nil {
		return err
	}
	for i := range batch {
		p := &batch[i]
		n, size := 0, 0
		for n < len(msgs) && msgs[n].Seq <= p.sh.LastSeq {
			size += lineLen(msgs[n])
			n++
		}
		mine := msgs[:n:n]
		msgs = msgs[n:]
		if ahead && int64(size) > s.eagerBytes() {
			p.later, p.msgs, p.length = renderLater, mine, int64(size)
			continue
		}
		if err := s.renderShard(e, p, mine, size); err != nil {
			return err
		}
	}
	return nil
}

// renderShard renders p from its messages, size bytes (their lineLens),
// and hashes it. A shard that renders to other bytes than recorded is a
// NondeterministicError.
func (s *Service) renderShard(e models.Export, p *pendingShard, msgs []chat.Message, size int) error {
	b, err := s.render(e, p.sh, msgs, size)
	if err != nil {
		return err
	}
	if h := s.hooks.Rendered; h != nil {
		h(e.ID, p.sh.N, len(b))
	}
	sum := sha256.Sum256(b)
	p.data, p.sum = b, hex.EncodeToString(sum[:])
	if p.sh.SHA256 != nil && *p.sh.SHA256 != p.sum {
		return &NondeterministicError{Shard: p.sh.N, Recorded: *p.sh.SHA256, Got: p.sum}
	}
	p.record = p.sh.SHA256 == nil
	return nil
}

// render writes shard sh's messages as JSON Lines. The output depends only
// on the snapshot and the data at or below it, never on the run.
func (s *Service) render(e models.Export, sh models.ExportShard, msgs []chat.Message, size int) ([]byte, error) {
	if len(msgs) != sh.Messages {
		return nil, &NondeterministicError{Shard: sh.N, RecordedMsgs: sh.Messages, GotMsgs: len(msgs), messagesDiffer: true}
	}
	// Room for every line up front (size is the sum of their lineLens):
	// growing the buffer as it fills copied each shard several times.
	b := make([]byte, 0, size)
	for _, m := range msgs {
		b = appendLine(b, m)
	}
	if h := s.hooks.MutateShard; h != nil {
		b = h(e.ID, sh.N, b)
	}
	return b, nil
}

// record stores the new hashes of a window in one statement, before any
// of its objects is put: a crash in between leaves records whose objects
// are missing, which the next run regenerates and compares. A hash a
// stale worker recorded meanwhile must agree.
func (s *Service) record(ctx context.Context, id string, window []pendingShard) error {
	var ns []int
	var sums, sizes strings.Builder
	var sumArgs, sizeArgs []any
	for _, p := range window {
		if !p.record {
			continue
		}
		ns = append(ns, p.sh.N)
		sums.WriteString(" WHEN ? THEN ?")
		sizes.WriteString(" WHEN ? THEN ?")
		sumArgs = append(sumArgs, p.sh.N, p.sum)
		sizeArgs = append(sizeArgs, p.sh.N, len(p.data))
	}
	if len(ns) == 0 {
		return nil
	}
	args := append(append(sumArgs, sizeArgs...), id, ns)
	res := s.db.WithContext(ctx).Exec("UPDATE export_shards SET sha256 = CASE n"+sums.String()+" END, bytes = CASE n"+sizes.String()+
		" END WHERE export_id = ? AND n IN ? AND sha256 IS NULL", args...)
	if res.Error != nil {
		return res.Error
	}
	if int(res.RowsAffected) == len(ns) {
		return nil
	}
	var recs []models.ExportShard
	if err := s.db.WithContext(ctx).Where("export_id = ? AND n IN ?", id, ns).Find(&recs).Error; err != nil {
		return err
	}
	got := map[int]string{}
	for _, r := range recs {
		got[r.N] = deref(r.SHA256)
	}
	for _, p := range window {
		if p.record && got[p.sh.N] != p.sum {
			return &NondeterministicError{Shard: p.sh.N, Recorded: got[p.sh.N], Got: p.sum}
		}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// putWindow puts the window's new and repaired objects, putsInFlight at a
// time, then reports the writes, and counts each shard and runs its
// AfterShard hook in plan order.
func (s *Service) putWindow(ctx context.Context, e models.Export, window []pendingShard, st *runStats, log *slog.Logger) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(putsInFlight)
	for _, p := range window {
		if p.result == shardSkipped {
			continue
		}
		g.Go(func() error {
			// Signed with the object's own hash: the SDK need not hash it
			// again, and S3 stores it only if it is those bytes.
			z, err := encodeShard(p.data)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(z)
			return s.store.PutSHA256(gctx, shardKey(e.ID, p.sh.N), z, hex.EncodeToString(sum[:]), shardContentType)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if h := s.hooks.ShardWritten; h != nil {
		for _, p := range window {
			if p.result != shardSkipped {
				h(e.ID, p.sh.N)
			}
		}
	}
	for _, p := range window {
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
		if h := s.hooks.AfterShard; h != nil {
			if err := h(e.ID, p.sh.N); err != nil {
				return err
			}
		}
	}
	return nil
}

// Object states as fetch finds them.
const (
	objectVerified = iota
	objectMissing
	objectAltered
)

// shardContentType is a shard object's: Snappy's framing format (see
// encodeShard).
const shardContentType = "application/x-snappy-framed"

// encodeShard is what a shard's object holds: its JSON in Snappy's framing
// format. Shards exist only to be verified by a rerun, and as JSON they
// were most of the bytes an export sent to S3: in BenchmarkExportScale
// 253 MiB for an artifact of 33, which the S3 server hashed three times
// (MD5 for the ETag, the signed SHA-256, its own CRC64NVME) and a slow
// link took seconds to carry. Framed they are 47 MiB, for up to half a
// CPU second of the worker's. The artifact does not depend on it: it is
// the shards' JSON, gzipped in one stream.
//
// The framing format compresses in blocks of 64 KiB, so the only buffer
// beside the shard is the output, a sixth of it or so (one Snappy block
// for the whole shard would first take a buffer larger than the shard),
// and any Snappy library reads it. One goroutine: the stages already run
// several puts at once.
func encodeShard(b []byte) ([]byte, error) {
	var out bytes.Buffer
	out.Grow(len(b)/4 + 64)
	w := s2.NewWriter(&out, s2.WriterSnappyCompat(), s2.WriterConcurrency(1))
	if err := w.EncodeBuffer(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// maxEncoded bounds the size of encodeShard's output for size bytes: a
// block that does not compress is stored as it is, with 8 bytes of
// header and checksum per 64 KiB, after the 10-byte stream identifier.
func maxEncoded(size int64) int64 {
	return size + 10 + 8*(size/(64<<10-8)+1)
}

// fetch reads the shard object at key and returns its JSON when that
// hashes to want (and is size bytes, when the size is recorded). The
// object is Snappy-framed (encodeShard), or the JSON itself as versions
// before encodeShard stored it, which a rerun after an upgrade keeps
// rather than rewrites; such a version, rerunning after a downgrade, finds
// an encoded object's size wrong and rewrites it. An object larger than
// any encoding of the recorded size is altered without being read.
func (s *Service) fetch(ctx context.Context, key, want string, size *int64) ([]byte, int, error) {
	rc, info, err := s.store.GetVersion(ctx, key)
	if errors.Is(err, s3store.ErrNotFound) {
		return nil, objectMissing, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer rc.Close()
	if size != nil && info.Size > maxEncoded(*size) {
		return nil, objectAltered, nil
	}
	// One buffer of the object's size and a byte more, in case the store
	// sent more than it said: grown as it filled, the buffer of a large
	// shard was copied many times.
	b := make([]byte, info.Size+1)
	n, err := io.ReadFull(rc, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, 0, err
	}
	if int64(n) != info.Size {
		return nil, objectAltered, nil
	}
	b = b[:n]
	if size == nil || int64(len(b)) == *size {
		// The JSON itself, as versions before encodeShard stored it. An
		// encoding can be as long as its JSON, so one that does not match
		// is decoded next; a record without a size was not written by
		// this version, which always records the size with the hash.
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) == want {
			return b, objectVerified, nil
		}
		if size == nil {
			return nil, objectAltered, nil
		}
	}
	data, ok := decodeShard(b, *size)
	if !ok {
		return nil, objectAltered, nil
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != want {
		return nil, objectAltered, nil
	}
	return data, objectVerified, nil
}

// decodeShard decodes b, a shard object that encodeShard made of size
// bytes of JSON, or reports that it is not one (the framing's CRC32Cs
// catch most damage before the caller's SHA-256 does).
func decodeShard(b []byte, size int64) ([]byte, bool) {
	r := s2.NewReader(bytes.NewReader(b), s2.ReaderMaxBlockSize(64<<10))
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, false
	}
	if n, err := r.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		return nil, false // more than size bytes, or damage after them
	}
	return data, true
}

// assembler streams shards in order through gzip into the artifact,
// hashing on the way.
type assembler struct {
	s    *Service
	e    models.Export
	zw   *gzip.Writer
	hash hash.Hash
	crc  hash.Hash32
	seen int
}

func (s *Service) newAssembler(e models.Export, w io.Writer) (*assembler, error) {
	a := &assembler{s: s, e: e, hash: sha256.New(), crc: crc32.New(crc32.MakeTable(crc32.Castagnoli))}
	// No name, mtime 0 and OS "unknown", so the bytes depend on the
	// content alone. (This gzip writes the zero time.Time as its Unix
	// seconds, not 0: the epoch is set explicitly.)
	// The CRC32C costs about 0.04 s per GiB beside the SHA-256's 0.6, and
	// spares every download of the artifact a SHA-256 of its own.
	zw, err := gzip.NewWriterLevel(io.MultiWriter(w, a.hash, a.crc), gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	zw.ModTime = time.Unix(0, 0)
	zw.OS = 255
	a.zw = zw
	return a, nil
}

// add appends shard p; its bytes were verified or just generated.
func (a *assembler) add(p pendingShard) error {
	if _, err := a.zw.Write(p.data); err != nil {
		return err
	}
	a.seen++
	if h := a.s.hooks.Assembled; h != nil {
		return h(a.e.ID, p.sh.N)
	}
	return nil
}

// close finishes the gzip stream once all count shards are in, and
// returns the artifact's digests.
func (a *assembler) close(count int) (built, error) {
	if a.seen != count {
		return built{}, fmt.Errorf("assemble: the plan has %d shards, %d were found", count, a.seen)
	}
	if err := a.zw.Close(); err != nil {
		return built{}, err
	}
	return built{sha256: hex.EncodeToString(a.hash.Sum(nil)), crc32c: s3store.EncodeCRC32C(a.crc.Sum32())}, nil
}
