package chat

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/models"
)

// SeedOptions describe a synthetic chat data set.
type SeedOptions struct {
	// Users take part; the first one is in every conversation (so a demo
	// user sees the whole data set), and there must be at least two.
	Users []string
	// Conversations to create; 0 means one per two users, at least 2.
	Conversations int
	// Messages to write in total.
	Messages int
	// Seed makes the data set repeatable: the same seed and users give the
	// same shape, bodies, joins, leaves and recalls (ids and times differ).
	Seed uint64
	// Batch is how many messages go into one transaction; default 5000.
	Batch int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Progress, when set, is called after each batch with the messages
	// written so far.
	Progress func(done int)
}

// SeedReport says what Seed wrote.
type SeedReport struct {
	Conversations []string
	Messages      int
	Joins         int // beyond the founding members
	Leaves        int
	Recalls       int
	LastGseq      int64
}

// Seed writes a realistic synthetic data set fast: conversations of uneven
// size, members who leave and come back, and about one recall per hundred
// messages. It allocates gseqs through the same counter row as every other
// chat write, a batch at a time, so the data is snapshot-consistent and
// seeding may run beside live traffic. Rows go in with multi-row INSERTs.
func Seed(ctx context.Context, db *gorm.DB, o SeedOptions) (SeedReport, error) {
	var rep SeedReport
	if len(o.Users) < 2 {
		return rep, errors.New("chat: seed needs at least two users")
	}
	if o.Conversations <= 0 {
		o.Conversations = max(2, len(o.Users)/2)
	}
	if o.Batch <= 0 {
		o.Batch = 5000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	sd := &seeder{db: db, o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))}
	// Message times spread backwards from now, one second apart, so the
	// data reads like a history rather than a burst.
	sd.clock = models.Time(o.Now()).Add(-time.Duration(o.Messages+1) * time.Second)
	if err := sd.createConversations(ctx); err != nil {
		return rep, err
	}
	for done := 0; done < o.Messages; {
		n := min(o.Batch, o.Messages-done)
		if err := sd.batch(ctx, n); err != nil {
			return sd.rep, err
		}
		done += n
		if o.Progress != nil {
			o.Progress(done)
		}
	}
	return sd.rep, nil
}

type seedConv struct {
	id      string
	gseq    int64 // the gseq that created it
	weight  float64
	members []string        // current members, in join order
	former  map[string]bool // left and not back yet
	ever    map[string]bool // were ever members
}

type seeder struct {
	db    *gorm.DB
	o     SeedOptions
	rng   *rand.Rand
	clock time.Time
	convs []*seedConv
	total float64
	rep   SeedReport
}

func (sd *seeder) createConversations(ctx context.Context) error {
	now := models.Time(sd.o.Now())
	var convRows, memberRows [][]any
	for i := range sd.o.Conversations {
		c := &seedConv{id: models.NewID("cnv"), weight: 1 / float64(i+1), former: map[string]bool{}, ever: map[string]bool{}}
		c.members = append(c.members, sd.o.Users[0])
		// Founding members besides the first user: up to half the others,
		// so there is someone left to join later.
		others := len(sd.o.Users) - 1
		for _, k := range sd.rng.Perm(others)[:1+sd.rng.IntN(max(1, others/2))] {
			c.members = append(c.members, sd.o.Users[k+1])
		}
		sd.convs = append(sd.convs, c)
		sd.total += c.weight
		sd.rep.Conversations = append(sd.rep.Conversations, c.id)
	}
	var listRows [][]any
	return writeTx(ctx, sd.db, int64(len(sd.convs)), func(tx *gorm.DB, first int64) error {
		for i, c := range sd.convs {
			g := first + int64(i)
			c.gseq = g
			convRows = append(convRows, []any{c.id, fmt.Sprintf("Seeded conversation %d", i+1), c.members[0], g, 0, now})
			for _, u := range c.members {
				memberRows = append(memberRows, []any{c.id, u, g, c.members[0], now})
				listRows = append(listRows, []any{u, c.id, g})
				c.ever[u] = true
			}
		}
		sd.rep.LastGseq = first + int64(len(sd.convs)) - 1
		if err := insertRows(tx, "conversations", "id, title, created_by, created_gseq, last_seq, created_at", convRows); err != nil {
			return err
		}
		if err := insertRows(tx, "memberships", "conversation_id, user_id, join_gseq, added_by, created_at", memberRows); err != nil {
			return err
		}
		return insertRows(tx, "user_conversations", "user_id, conversation_id, created_gseq", listRows)
	})
}

// seedEvent is one chat write of a batch, before it has a gseq.
type seedEvent struct {
	kind   byte // 'm'essage, 'j'oin, 'l'eave, 'r'ecall
	conv   *seedConv
	user   string
	body   string
	msgIdx int  // for recalls: the recalled message's event index
	first  bool // for joins: the user's first in the conversation
}

func (sd *seeder) batch(ctx context.Context, messages int) error {
	events := sd.plan(messages)
	return writeTx(ctx, sd.db, int64(len(events)), func(tx *gorm.DB, first int64) error {
		// Seqs continue from what the database has: someone may have
		// posted to a seeded conversation through the API meanwhile.
		seqs := map[string]int64{}
		ids := make([]string, len(sd.convs))
		for i, c := range sd.convs {
			ids[i] = c.id
		}
		var last []struct {
			ID      string
			LastSeq int64
		}
		if err := tx.Raw("SELECT id, last_seq FROM conversations WHERE id IN ?", ids).Scan(&last).Error; err != nil {
			return err
		}
		for _, l := range last {
			seqs[l.ID] = l.LastSeq
		}
		now := models.Time(sd.o.Now())
		var msgRows, recallRows [][]any
		msgSeq := make([]int64, len(events))
		for i, e := range events {
			g := first + int64(i)
			var err error
			switch e.kind {
			case 'm':
				seqs[e.conv.id]++
				msgSeq[i] = seqs[e.conv.id]
				sd.clock = sd.clock.Add(time.Second)
				msgRows = append(msgRows, []any{e.conv.id, msgSeq[i], g, e.user, e.body, sd.clock})
			case 'r':
				recallRows = append(recallRows, []any{e.conv.id, msgSeq[e.msgIdx], g, e.user, now})
			case 'j':
				// Membership changes are rare and depend on each other
				// (a leave closes the interval a join opened), so they go
				// one statement each, in order.
				err = tx.Exec("INSERT INTO memberships (conversation_id, user_id, join_gseq, added_by, created_at) VALUES (?, ?, ?, ?, ?)",
					e.conv.id, e.user, g, e.conv.members[0], now).Error
				if err == nil && e.first {
					err = listFor(tx, e.user, e.conv.id, e.conv.gseq)
				}
			case 'l':
				err = tx.Exec("UPDATE memberships SET leave_gseq = ? WHERE conversation_id = ? AND user_id = ? AND leave_gseq IS NULL",
					g, e.conv.id, e.user).Error
			}
			if err != nil {
				return fmt.Errorf("chat: seed membership: %w", err)
			}
		}
		sd.rep.LastGseq = first + int64(len(events)) - 1
		if err := insertRows(tx, "messages", "conversation_id, seq, gseq, sender_id, body, sent_at", msgRows); err != nil {
			return err
		}
		if err := insertRows(tx, "recalls", "conversation_id, seq, recall_gseq, recalled_by, recalled_at", recallRows); err != nil {
			return err
		}
		for id, seq := range seqs {
			if err := tx.Exec("UPDATE conversations SET last_seq = ? WHERE id = ?", seq, id).Error; err != nil {
				return err
			}
		}
		return nil
	})
}

// plan draws the next batch of events and updates the in-memory
// membership to match.
func (sd *seeder) plan(messages int) []seedEvent {
	var events []seedEvent
	// Membership churn: about six changes per conversation over the
	// whole data set, so leaves and re-joins land inside the history.
	churn := max(1, sd.o.Messages/(6*len(sd.convs)))
	for range messages {
		if sd.rng.IntN(churn) == 0 {
			if e, ok := sd.churn(); ok {
				events = append(events, e)
			}
		}
		c := sd.pickConv()
		sender := c.members[sd.rng.IntN(len(c.members))]
		events = append(events, seedEvent{kind: 'm', conv: c, user: sender, body: sd.body()})
		sd.rep.Messages++
		if sd.rng.IntN(100) == 0 {
			events = append(events, seedEvent{kind: 'r', conv: c, user: sender, msgIdx: len(events) - 1})
			sd.rep.Recalls++
		}
	}
	return events
}

// churn makes a member leave, or a former member come back, or a new
// user join. The first user and the founder never leave, so every
// conversation keeps a member who can post.
func (sd *seeder) churn() (seedEvent, bool) {
	c := sd.pickConv()
	leave := sd.rng.IntN(2) == 0
	for range 2 {
		if leave && len(c.members) > 2 {
			i := 2 + sd.rng.IntN(len(c.members)-2)
			u := c.members[i]
			c.members = append(c.members[:i], c.members[i+1:]...)
			c.former[u] = true
			sd.rep.Leaves++
			return seedEvent{kind: 'l', conv: c, user: u}, true
		}
		if !leave {
			for _, k := range sd.rng.Perm(len(sd.o.Users)) {
				u := sd.o.Users[k]
				if !contains(c.members, u) {
					delete(c.former, u)
					c.members = append(c.members, u)
					sd.rep.Joins++
					first := !c.ever[u]
					c.ever[u] = true
					return seedEvent{kind: 'j', conv: c, user: u, first: first}, true
				}
			}
		}
		leave = !leave // nobody to remove, or nobody to add: do the other
	}
	return seedEvent{}, false
}

func (sd *seeder) pickConv() *seedConv {
	x := sd.rng.Float64() * sd.total
	for _, c := range sd.convs {
		if x < c.weight {
			return c
		}
		x -= c.weight
	}
	return sd.convs[len(sd.convs)-1]
}

var seedWords = strings.Fields(`the a ferry export snapshot message shard bucket upload merge
	meeting tomorrow lunch deploy review ticket release notes coffee please thanks sure later
	done tested ship rollback incident fixed broken green build cache index query latency
	weekend plan budget draft slides customer invoice design sketch idea question answer`)

func (sd *seeder) body() string {
	n := 3 + sd.rng.IntN(18)
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(seedWords[sd.rng.IntN(len(seedWords))])
	}
	return b.String()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// insertRows inserts rows with multi-row INSERT statements of at most 500
// rows each (3,000 placeholders at six columns: within both engines'
// limits).
func insertRows(tx *gorm.DB, table, cols string, rows [][]any) error {
	const chunk = 500
	for len(rows) > 0 {
		n := min(chunk, len(rows))
		ph := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(rows[0])), ", ") + ")"
		var args []any
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		q := "INSERT INTO " + table + " (" + cols + ") VALUES " + strings.TrimSuffix(strings.Repeat(ph+", ", n), ", ")
		if err := tx.Exec(q, args...).Error; err != nil {
			return fmt.Errorf("chat: seed %s: %w", table, err)
		}
		rows = rows[n:]
	}
	return nil
}
