package chat

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/models"
)

// Interval is a membership interval [Join, Leave) in gseqs. Leave 0 means
// open: still a member (or, as of a snapshot, still a member then).
type Interval struct {
	Join  int64
	Leave int64
}

// ConversationIntervals are one user's intervals in one conversation,
// oldest first.
type ConversationIntervals struct {
	Conversation string
	Intervals    []Interval
}

// Intervals returns userID's membership intervals, grouped by conversation
// in id order. conv, when not empty, restricts them to one conversation.
// asOf > 0 gives them as of that snapshot: only intervals that started at
// or before it, and leaves after it do not count (the interval is open).
func Intervals(ctx context.Context, db *gorm.DB, userID, conv string, asOf int64) ([]ConversationIntervals, error) {
	q := "SELECT conversation_id, join_gseq, leave_gseq FROM memberships WHERE user_id = ?"
	args := []any{userID}
	if conv != "" {
		q += " AND conversation_id = ?"
		args = append(args, conv)
	}
	if asOf > 0 {
		q += " AND join_gseq <= ?"
		args = append(args, asOf)
	}
	var rows []struct {
		ConversationID string
		JoinGseq       int64
		LeaveGseq      *int64
	}
	if err := db.WithContext(ctx).Raw(q+" ORDER BY conversation_id, join_gseq", args...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("chat: intervals: %w", err)
	}
	var out []ConversationIntervals
	for _, r := range rows {
		iv := Interval{Join: r.JoinGseq}
		if r.LeaveGseq != nil && (asOf <= 0 || *r.LeaveGseq <= asOf) {
			iv.Leave = *r.LeaveGseq
		}
		if n := len(out); n == 0 || out[n-1].Conversation != r.ConversationID {
			out = append(out, ConversationIntervals{Conversation: r.ConversationID})
		}
		last := &out[len(out)-1]
		last.Intervals = append(last.Intervals, iv)
	}
	return out, nil
}

// Reader names the membership intervals that decide which messages a
// Range shows: a user's intervals as the memberships table has them now
// (Member), or a copy stored elsewhere, such as an export's permission
// snapshot (StoredIntervals). The zero Reader sees nothing.
type Reader struct {
	table, column, key string
}

// Member reads as userID through their membership intervals now.
func Member(userID string) Reader {
	return Reader{table: "memberships", column: "user_id", key: userID}
}

var identifier = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// StoredIntervals reads through intervals kept in table: the rows whose
// column equals key, each with conversation_id, join_gseq and leave_gseq
// (NULL for an interval still open). Within one conversation the intervals
// of one key must not overlap, and (column, conversation_id, join_gseq)
// should be indexed. table and column are names from code, never input.
func StoredIntervals(table, column, key string) Reader {
	if !identifier.MatchString(table) || !identifier.MatchString(column) {
		panic(fmt.Sprintf("chat: bad interval table %q or column %q", table, column))
	}
	return Reader{table: table, column: column, key: key}
}

// Range selects the messages of one conversation that a reader sees.
type Range struct {
	Conversation string
	Reader       Reader
	// AsOf > 0 reads as of that snapshot: messages with a larger gseq are
	// left out and recalls with a larger gseq do not count. 0 reads now.
	// A leave after AsOf does not hide anything at or before it.
	AsOf int64
	// FromSeq and ToSeq bound seq, inclusive; 0 leaves that end open.
	FromSeq, ToSeq int64
	// Limit caps the number of messages; 0 means no cap.
	Limit int
}

// How visibility is decided: the reader's intervals in the conversation
// are read once, in join order, and each message's gseq is looked up among
// them by binary search; a message is visible when the last interval that
// began at or before it has not ended by then (intervals never overlap).
// The messages are read in seq order straight off their primary key,
// bounded by the seq range, the snapshot and the gseq span the intervals
// cover. So the SQL is the same small statement however many intervals
// there are. One OR term per interval made SQLite refuse the query past
// about 1,000 intervals ("Expression tree is too large"), and a subquery
// per message is no way out: MySQL cannot use a range on an outer column
// in it, so each lookup scanned all of the reader's intervals.

// intervals returns the reader's intervals in r.Conversation, oldest
// first. As of a snapshot, a leave after it does not count.
func (r Range) intervals(ctx context.Context, db *gorm.DB) ([]Interval, error) {
	if r.Reader.table == "" {
		return nil, nil
	}
	q := fmt.Sprintf("SELECT join_gseq, leave_gseq FROM %s WHERE %s = ? AND conversation_id = ?", r.Reader.table, r.Reader.column)
	args := []any{r.Reader.key, r.Conversation}
	if r.AsOf > 0 {
		q += " AND join_gseq <= ?"
		args = append(args, r.AsOf)
	}
	var rows []struct {
		JoinGseq  int64
		LeaveGseq *int64
	}
	if err := db.WithContext(ctx).Raw(q+" ORDER BY join_gseq", args...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("chat: intervals of %s: %w", r.Conversation, err)
	}
	out := make([]Interval, len(rows))
	for i, row := range rows {
		out[i].Join = row.JoinGseq
		if row.LeaveGseq != nil && (r.AsOf <= 0 || *row.LeaveGseq <= r.AsOf) {
			out[i].Leave = *row.LeaveGseq
		}
	}
	return out, nil
}

// covers reports whether gseq lies in one of ivs (sorted, disjoint).
func covers(ivs []Interval, gseq int64) bool {
	i := sort.Search(len(ivs), func(i int) bool { return ivs[i].Join > gseq }) - 1
	return i >= 0 && (ivs[i].Leave == 0 || gseq < ivs[i].Leave)
}

// bounds renders what SQL can cheaply check for r with intervals ivs (at
// least one): the conversation, the seq range, the snapshot and the gseq
// span of the intervals, as a condition on messages m.
func (r Range) bounds(ivs []Interval) (string, []any) {
	conds := []string{"m.conversation_id = ?", "m.gseq >= ?"}
	args := []any{r.Conversation, ivs[0].Join}
	if last := ivs[len(ivs)-1]; last.Leave > 0 {
		conds = append(conds, "m.gseq < ?")
		args = append(args, last.Leave)
	}
	if r.AsOf > 0 {
		conds = append(conds, "m.gseq <= ?")
		args = append(args, r.AsOf)
	}
	if r.FromSeq > 0 {
		conds = append(conds, "m.seq >= ?")
		args = append(args, r.FromSeq)
	}
	if r.ToSeq > 0 {
		conds = append(conds, "m.seq <= ?")
		args = append(args, r.ToSeq)
	}
	return strings.Join(conds, " AND "), args
}

// scanChunk is how many message keys one query of a scan reads: a scan
// that stops early (a page is full) leaves at most this much unread, and a
// long one costs one query per chunk.
const scanChunk = 5000

// scanQuery is the statement that reads a chunk of r's message keys after
// a position. With a seq range it walks the primary key from the range's
// start, after a seq; on MySQL it names the primary key: the index on
// (conversation_id, gseq) covers (seq, gseq) too, and MariaDB sometimes
// prefers it and sorts every key of the conversation to return the first
// chunk, where walking the primary key stops after one chunk. Without a
// seq range (a whole conversation, as an export's plan reads it) it walks
// that index instead, after a gseq: within a conversation seq and gseq
// grow together (see "The global sequence" in the package doc), so gseq
// order is seq order, and the index holds both keys, where the primary
// key's leaves hold every message body too.
func scanQuery(db *gorm.DB, r Range, ivs []Interval) string {
	where, _ := r.bounds(ivs)
	from, index, after := "messages m", "PRIMARY", "m.seq"
	if r.FromSeq == 0 && r.ToSeq == 0 {
		index, after = "ix_messages_conv_gseq", "m.gseq"
	}
	if models.Dialect(db) == models.MySQL {
		from += " FORCE INDEX (" + index + ")"
	}
	return fmt.Sprintf("SELECT m.seq, m.gseq FROM %s WHERE %s AND %s > ? ORDER BY %s LIMIT %d", from, where, after, after, scanChunk)
}

// visibleSeqs calls fn with the seq of every message in r, in seq order,
// reading (seq, gseq) pairs a chunk at a time. fn returns false to stop.
func (r Range) visibleSeqs(ctx context.Context, db *gorm.DB, ivs []Interval, fn func(seq int64) (bool, error)) error {
	if len(ivs) == 0 {
		return nil
	}
	q := scanQuery(db, r, ivs)
	byGseq := r.FromSeq == 0 && r.ToSeq == 0
	_, args := r.bounds(ivs)
	after := int64(0)
	for {
		rows, err := db.WithContext(ctx).Raw(q, append(args, after)...).Rows()
		if err != nil {
			return fmt.Errorf("chat: scan %s: %w", r.Conversation, err)
		}
		n, stop := 0, false
		for rows.Next() {
			var seq, gseq int64
			if err := rows.Scan(&seq, &gseq); err != nil {
				rows.Close()
				return fmt.Errorf("chat: scan %s: %w", r.Conversation, err)
			}
			n++
			if after = seq; byGseq {
				after = gseq
			}
			if stop || !covers(ivs, gseq) {
				continue
			}
			more, err := fn(seq)
			if err != nil {
				rows.Close()
				return err
			}
			stop = !more
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("chat: scan %s: %w", r.Conversation, err)
		}
		if stop || n < scanChunk {
			return nil
		}
	}
}

// VisibleSeqs calls fn with the seq of every message in r, in seq order.
// Memory does not grow with the number of messages.
func VisibleSeqs(ctx context.Context, db *gorm.DB, r Range, fn func(seq int64) error) error {
	ivs, err := r.intervals(ctx, db)
	if err != nil {
		return err
	}
	n := 0
	return r.visibleSeqs(ctx, db, ivs, func(seq int64) (bool, error) {
		n++
		return r.Limit <= 0 || n < r.Limit, fn(seq)
	})
}

// ReadMessages returns the messages in r, in seq order, with recalls and
// attachments applied.
func ReadMessages(ctx context.Context, db *gorm.DB, r Range) ([]Message, error) {
	ivs, err := r.intervals(ctx, db)
	if err != nil {
		return nil, err
	}
	var seqs []int64
	err = r.visibleSeqs(ctx, db, ivs, func(seq int64) (bool, error) {
		seqs = append(seqs, seq)
		return r.Limit <= 0 || len(seqs) < r.Limit, nil
	})
	if err != nil || len(seqs) == 0 {
		return nil, err
	}
	out, err := readRows(ctx, db, r, seqs)
	if err != nil {
		return nil, err
	}
	for _, m := range out {
		if !m.Recalled {
			if err := attach(ctx, db, out); err != nil {
				return nil, err
			}
			break
		}
	}
	return out, nil
}

// readQuery is the start of a statement that reads messages of r; a
// condition on m.seq follows. Recalls are applied after the read (recall),
// not joined: a join looked up every message in recalls by primary key,
// which cost the database more than reading the messages themselves
// (recalls are few), while one range read of the recalls in the span of
// the messages read costs one statement.
func readQuery() string {
	return "SELECT m.seq, m.gseq, m.sender_id, m.body, m.sent_at FROM messages m WHERE m.conversation_id = ? AND "
}

// readRows reads the messages seqs (ascending) of r.Conversation. Where
// they are most of their seq span, one range query reads the span and
// drops the rest; otherwise they are read by lists of seqs.
func readRows(ctx context.Context, db *gorm.DB, r Range, seqs []int64) ([]Message, error) {
	first, last := seqs[0], seqs[len(seqs)-1]
	next := 0 // the index in seqs of the next wanted message
	keep := func(seq, _ int64) bool {
		for next < len(seqs) && seqs[next] < seq {
			next++
		}
		if next == len(seqs) || seq != seqs[next] {
			return false // inside the span, outside the reader's intervals
		}
		next++
		return true
	}
	if span := last - first + 1; span <= 2*int64(len(seqs)) {
		return readWhere(ctx, db, r, make([]Message, 0, len(seqs)), keep, "m.seq BETWEEN ? AND ?", first, last)
	}
	out := make([]Message, 0, len(seqs))
	for i := 0; i < len(seqs); i += 500 {
		var err error
		if out, err = readWhere(ctx, db, r, out, keep, "m.seq IN ?", seqs[i:min(i+500, len(seqs))]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readWhere appends to out the messages of r.Conversation matching cond
// (on m.seq), in seq order, that keep accepts.
func readWhere(ctx context.Context, db *gorm.DB, r Range, out []Message, keep func(seq, gseq int64) bool, cond string, condArgs ...any) ([]Message, error) {
	from := len(out)
	args := append([]any{r.Conversation}, condArgs...)
	rows, err := db.WithContext(ctx).Raw(readQuery()+cond+" ORDER BY m.seq", args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("chat: read %s: %w", r.Conversation, err)
	}
	defer rows.Close()
	for rows.Next() {
		m := Message{Conversation: r.Conversation}
		var sentAt time.Time
		if err := rows.Scan(&m.Seq, &m.Gseq, &m.Sender, &m.Body, &sentAt); err != nil {
			return nil, fmt.Errorf("chat: read %s: %w", r.Conversation, err)
		}
		if !keep(m.Seq, m.Gseq) {
			continue
		}
		m.SentAt = sentAt.UTC()
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("chat: read %s: %w", r.Conversation, err)
	}
	return out, recall(ctx, db, r, out[from:])
}

// recall applies to msgs (one conversation, seq order, just read) the
// recalls that count for r: those as of r.AsOf for a snapshot, else all.
// Read after the messages, a recall is never older than they are: a live
// read may show a message recalled in between as recalled, never the
// reverse, and a snapshot's recalls (recall_gseq <= AsOf) no longer change.
func recall(ctx context.Context, db *gorm.DB, r Range, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	q, args := recallQuery(r, msgs[0].Seq, msgs[len(msgs)-1].Seq)
	var recalls []struct{ Seq, RecallGseq int64 }
	if err := db.WithContext(ctx).Raw(q, args...).Scan(&recalls).Error; err != nil {
		return fmt.Errorf("chat: recalls of %s: %w", r.Conversation, err)
	}
	i := 0
	for _, rc := range recalls {
		if r.AsOf > 0 && rc.RecallGseq > r.AsOf {
			continue // after the snapshot
		}
		for i < len(msgs) && msgs[i].Seq < rc.Seq {
			i++
		}
		if i < len(msgs) && msgs[i].Seq == rc.Seq {
			msgs[i].Recalled, msgs[i].Body = true, ""
		}
	}
	return nil
}

// recallQuery reads the recalls of r's conversation from seq first to
// last, with their gseq. The snapshot's bound is applied by the caller: a
// condition on recall_gseq tempted MariaDB into a range over every recall
// up to the snapshot, by its index on recall_gseq, instead of the few in
// the span by primary key.
func recallQuery(r Range, first, last int64) (string, []any) {
	return "SELECT seq, recall_gseq FROM recalls WHERE conversation_id = ? AND seq BETWEEN ? AND ? ORDER BY seq",
		[]any{r.Conversation, first, last}
}

// ReadSpan returns the same messages as ReadMessages for a range bounded
// by FromSeq and ToSeq (Limit is ignored), reading every message of the
// span in one query and dropping those outside the reader's intervals in
// Go. It saves ReadMessages' key scan, so it suits callers that know most
// of the span is visible, such as an export shard, whose plan counted its
// visible messages; over a sparse span it reads rows only to drop them.
func ReadSpan(ctx context.Context, db *gorm.DB, r Range) ([]Message, error) {
	if r.FromSeq <= 0 || r.ToSeq < r.FromSeq {
		return nil, fmt.Errorf("chat: ReadSpan needs a seq range, got %d..%d", r.FromSeq, r.ToSeq)
	}
	ivs, err := r.intervals(ctx, db)
	if err != nil || len(ivs) == 0 {
		return nil, err
	}
	// bounds starts with the conversation, which readQuery has already.
	where, args := r.bounds(ivs)
	keep := func(_, gseq int64) bool { return covers(ivs, gseq) }
	out, err := readWhere(ctx, db, r, nil, keep, strings.TrimPrefix(where, "m.conversation_id = ? AND "), args[1:]...)
	if err != nil || len(out) == 0 {
		return nil, err
	}
	for _, m := range out {
		if !m.Recalled {
			if err := attach(ctx, db, out); err != nil {
				return nil, err
			}
			break
		}
	}
	return out, nil
}

// attach fills in the attachments of msgs (one conversation, seq order)
// with one range query.
func attach(ctx context.Context, db *gorm.DB, msgs []Message) error {
	var rows []struct {
		Seq    int64
		FileID string
	}
	err := db.WithContext(ctx).Raw(`SELECT seq, file_id FROM message_attachments
		WHERE conversation_id = ? AND seq BETWEEN ? AND ? ORDER BY seq, position`,
		msgs[0].Conversation, msgs[0].Seq, msgs[len(msgs)-1].Seq).Scan(&rows).Error
	if err != nil {
		return fmt.Errorf("chat: attachments: %w", err)
	}
	i := 0
	for _, a := range rows {
		for i < len(msgs) && msgs[i].Seq < a.Seq {
			i++
		}
		if i < len(msgs) && msgs[i].Seq == a.Seq && !msgs[i].Recalled {
			msgs[i].Attachments = append(msgs[i].Attachments, a.FileID)
		}
	}
	return nil
}
