package chat

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
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

// Range selects the messages of one conversation that a reader with the
// given intervals sees.
type Range struct {
	Conversation string
	Intervals    []Interval
	// AsOf > 0 reads as of that snapshot: messages with a larger gseq are
	// left out and recalls with a larger gseq do not count. 0 reads now.
	AsOf int64
	// FromSeq and ToSeq bound seq, inclusive; 0 leaves that end open.
	FromSeq, ToSeq int64
	// Limit caps the number of messages; 0 means no cap.
	Limit int
}

// where renders the range as a condition on messages m.
func (r Range) where() (string, []any) {
	conds := []string{"m.conversation_id = ?"}
	args := []any{r.Conversation}
	if r.FromSeq > 0 {
		conds = append(conds, "m.seq >= ?")
		args = append(args, r.FromSeq)
	}
	if r.ToSeq > 0 {
		conds = append(conds, "m.seq <= ?")
		args = append(args, r.ToSeq)
	}
	if r.AsOf > 0 {
		conds = append(conds, "m.gseq <= ?")
		args = append(args, r.AsOf)
	}
	var ivs []string
	for _, iv := range r.Intervals {
		if iv.Leave > 0 {
			ivs = append(ivs, "(m.gseq >= ? AND m.gseq < ?)")
			args = append(args, iv.Join, iv.Leave)
		} else {
			ivs = append(ivs, "m.gseq >= ?")
			args = append(args, iv.Join)
		}
	}
	if len(ivs) == 0 {
		ivs = []string{"1 = 0"}
	}
	conds = append(conds, "("+strings.Join(ivs, " OR ")+")")
	return strings.Join(conds, " AND "), args
}

// VisibleSeqs calls fn with the seq of every message in r, in seq order,
// streaming: memory does not grow with the number of messages.
func VisibleSeqs(ctx context.Context, db *gorm.DB, r Range, fn func(seq int64) error) error {
	where, args := r.where()
	rows, err := db.WithContext(ctx).Raw("SELECT m.seq FROM messages m WHERE "+where+" ORDER BY m.seq", args...).Rows()
	if err != nil {
		return fmt.Errorf("chat: scan %s: %w", r.Conversation, err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return err
		}
		if err := fn(seq); err != nil {
			return err
		}
	}
	return rows.Err()
}

// ReadMessages returns the messages in r, in seq order, with recalls and
// attachments applied.
func ReadMessages(ctx context.Context, db *gorm.DB, r Range) ([]Message, error) {
	where, args := r.where()
	recallJoin := "LEFT JOIN recalls rc ON rc.conversation_id = m.conversation_id AND rc.seq = m.seq"
	if r.AsOf > 0 {
		recallJoin += " AND rc.recall_gseq <= ?"
		args = append([]any{r.AsOf}, args...)
	}
	q := "SELECT m.seq, m.gseq, m.sender_id, m.body, m.sent_at, rc.recall_gseq FROM messages m " + recallJoin +
		" WHERE " + where + " ORDER BY m.seq"
	if r.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", r.Limit)
	}
	rows, err := db.WithContext(ctx).Raw(q, args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("chat: read %s: %w", r.Conversation, err)
	}
	defer rows.Close()
	var out []Message
	anyLive := false
	for rows.Next() {
		m := Message{Conversation: r.Conversation}
		var sentAt time.Time
		var recall sql.NullInt64
		if err := rows.Scan(&m.Seq, &m.Gseq, &m.Sender, &m.Body, &sentAt, &recall); err != nil {
			return nil, fmt.Errorf("chat: read %s: %w", r.Conversation, err)
		}
		m.SentAt = sentAt.UTC()
		if recall.Valid {
			m.Recalled, m.Body = true, ""
		} else {
			anyLive = true
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	if anyLive {
		if err := attach(ctx, db, out); err != nil {
			return nil, err
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
