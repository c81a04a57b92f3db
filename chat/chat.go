package chat

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/page"
	"github.com/ferry-io/ferry/models"
)

// Limits on what the chat API accepts.
const (
	MaxTitleLen     = 200      // characters
	MaxBodyBytes    = 16 << 10 // bytes of UTF-8
	MaxAttachments  = 20
	DefaultPageSize = page.DefaultLimit // messages per page
	MaxPageSize     = page.MaxLimit
)

// Errors the service returns. Callers that never were members of a
// conversation get ErrConversationNotFound, as if it did not exist.
var (
	ErrConversationNotFound = errkind.New(errkind.NotFound, "conversation_not_found", "no such conversation")
	ErrNotMember            = errkind.New(errkind.Forbidden, "not_a_member", "you are not a member of this conversation")
	ErrAlreadyMember        = errkind.New(errkind.Conflict, "already_member", "the user is already a member of this conversation")
	ErrMemberNotFound       = errkind.New(errkind.NotFound, "member_not_found", "the user is not a member of this conversation")
	ErrUserNotFound         = errkind.New(errkind.NotFound, "user_not_found", "no such active user")
	ErrMessageNotFound      = errkind.New(errkind.NotFound, "message_not_found", "no such message")
	ErrNotSender            = errkind.New(errkind.Forbidden, "not_sender", "only the sender or an admin may recall a message")
	ErrNotSelf              = errkind.New(errkind.Forbidden, "not_self", "members may only remove themselves; admins may remove anyone")
	// ErrInvalidTitle and ErrInvalidBody are also what the HTTP layer
	// answers for a title or body that is not valid Unicode in the JSON
	// itself (an escaped lone surrogate, which decoding would replace).
	ErrInvalidTitle = errkind.Invalidf("invalid_title", "title must be 1-%d characters of valid UTF-8 without control characters", MaxTitleLen)
	ErrInvalidBody  = errkind.Invalidf("invalid_body", "the body must be valid UTF-8 text (no unpaired surrogate escapes) without NUL characters")
)

// Files answers whether file ids belong to a user. The uploads feature
// implements it; Owned returns an errkind.NotFound error naming the first
// id that is not userID's.
type Files interface {
	Owned(ctx context.Context, userID string, fileIDs []string) error
}

// Actor is who performs a chat operation.
type Actor struct {
	ID    string
	Admin bool
}

// Conversation is a conversation as a member sees it.
type Conversation struct {
	ID        string
	Title     string
	CreatedBy string
	CreatedAt time.Time
	// JoinGseq is the caller's latest join; Member says whether that
	// interval is still open.
	JoinGseq int64
	Member   bool
}

// Message is one message as a reader may see it. A recalled message has
// an empty Body and no Attachments.
type Message struct {
	Conversation string
	Seq          int64
	Gseq         int64
	Sender       string
	Body         string
	Attachments  []string
	Recalled     bool
	SentAt       time.Time
}

// Config configures a Service.
type Config struct {
	DB    *gorm.DB // required
	Files Files    // required: checks attachment ownership
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Service is the chat API. It is safe for concurrent use.
type Service struct {
	db    *gorm.DB
	files Files
	now   func() time.Time
	// beforeCommit, when set, runs inside every write transaction after
	// the gseq is allocated and the rows are written, just before the
	// commit.
	beforeCommit func()
}

// An Option changes a Service for a test.
type Option func(*Service)

// WithBeforeCommit makes every write transaction call fn just before it
// commits: tests hold transactions open there for a random time.
func WithBeforeCommit(fn func()) Option { return func(s *Service) { s.beforeCommit = fn } }

// New returns a Service.
func New(c Config, opts ...Option) (*Service, error) {
	if c.DB == nil || c.Files == nil {
		return nil, errors.New("chat: DB and Files are required")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	s := &Service{db: c.DB, files: c.Files, now: c.Now}
	for _, opt := range opts {
		opt(s)
	}
	return s, nil
}

// write runs fn in a transaction that has allocated n gseqs; fn gets the
// first. The counter is updated before anything is read, so the row lock
// is taken first and every read in fn sees all earlier chat writes. On
// MySQL the transaction runs at READ COMMITTED so those reads are current
// rather than a snapshot from before the lock was granted.
func (s *Service) write(ctx context.Context, n int64, fn func(tx *gorm.DB, first int64) error) error {
	return writeTx(ctx, s.db, n, func(tx *gorm.DB, first int64) error {
		if err := fn(tx, first); err != nil {
			return err
		}
		if s.beforeCommit != nil {
			s.beforeCommit()
		}
		return nil
	})
}

func writeTx(ctx context.Context, db *gorm.DB, n int64, fn func(tx *gorm.DB, first int64) error) error {
	var opts []*sql.TxOptions
	if models.Dialect(db) == models.MySQL {
		opts = append(opts, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	}
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		last, err := allocate(tx, n)
		if err != nil {
			return err
		}
		return fn(tx, last-n+1)
	}, opts...)
}

// allocate reserves n gseqs in tx and returns the last of them. The UPDATE
// holds the counter row's lock until tx ends.
func allocate(tx *gorm.DB, n int64) (int64, error) {
	if err := tx.Exec("UPDATE chat_counter SET value = value + ? WHERE id = 1", n).Error; err != nil {
		return 0, fmt.Errorf("chat: allocate gseq: %w", err)
	}
	var v int64
	if err := tx.Raw("SELECT value FROM chat_counter WHERE id = 1").Scan(&v).Error; err != nil {
		return 0, fmt.Errorf("chat: read gseq: %w", err)
	}
	return v, nil
}

// Snapshot returns the counter's committed value: every chat write with a
// gseq at or below it has committed, and every later one will get a larger
// gseq. Call it inside the transaction that records what it is for.
func Snapshot(ctx context.Context, db *gorm.DB) (int64, error) {
	var v int64
	if err := db.WithContext(ctx).Raw("SELECT value FROM chat_counter WHERE id = 1").Scan(&v).Error; err != nil {
		return 0, fmt.Errorf("chat: snapshot: %w", err)
	}
	return v, nil
}

// CreateConversation creates a conversation with the actor as its first
// member.
func (s *Service) CreateConversation(ctx context.Context, actor Actor, title string) (Conversation, error) {
	title = strings.TrimSpace(title)
	if err := checkTitle(title); err != nil {
		return Conversation{}, err
	}
	now := models.Time(s.now())
	conv := models.Conversation{ID: models.NewID("cnv"), Title: title, CreatedBy: actor.ID, CreatedAt: now}
	err := s.write(ctx, 1, func(tx *gorm.DB, g int64) error {
		conv.CreatedGseq = g
		if err := tx.Create(&conv).Error; err != nil {
			return err
		}
		if err := tx.Create(&models.Membership{ConversationID: conv.ID, UserID: actor.ID, JoinGseq: g, AddedBy: actor.ID, CreatedAt: now}).Error; err != nil {
			return err
		}
		return listFor(tx, actor.ID, conv.ID, g)
	})
	if err != nil {
		return Conversation{}, fmt.Errorf("chat: create conversation: %w", err)
	}
	return Conversation{ID: conv.ID, Title: conv.Title, CreatedBy: conv.CreatedBy, CreatedAt: now, JoinGseq: conv.CreatedGseq, Member: true}, nil
}

func checkTitle(t string) error {
	if t == "" || utf8.RuneCountInString(t) > MaxTitleLen || !utf8.ValidString(t) || strings.IndexFunc(t, unicode.IsControl) >= 0 {
		return ErrInvalidTitle
	}
	return nil
}

// Conversations lists the conversations the actor is or was a member of,
// newest first, a page at a time (package page): cursor is "" for the
// first page and a returned next after that; next is "" on the last page.
// The order is the gseq that created each conversation, unique and
// indexed, so a page is one range on that index.
func (s *Service) Conversations(ctx context.Context, actor Actor, cursor string, limit int) (list []Conversation, next string, err error) {
	if limit, err = page.Limit(limit); err != nil {
		return nil, "", err
	}
	after := int64(0)
	if cursor != "" {
		if after, err = page.DecodeInt(conversationList, cursor); err != nil {
			return nil, "", err
		}
	}
	var rows []models.Conversation
	if err := conversationPage(s.db.WithContext(ctx), actor.ID, after, limit).Find(&rows).Error; err != nil {
		return nil, "", fmt.Errorf("chat: list conversations: %w", err)
	}
	if len(rows) > limit {
		rows = rows[:limit]
		next = page.EncodeInt(conversationList, rows[limit-1].CreatedGseq)
	}
	if len(rows) == 0 {
		return nil, "", nil
	}
	// The caller's membership in just this page's conversations.
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	var ms []struct {
		ConversationID string
		JoinGseq       int64
		OpenCount      int64
	}
	err = s.db.WithContext(ctx).Raw(`SELECT conversation_id, MAX(join_gseq) AS join_gseq,
			SUM(CASE WHEN leave_gseq IS NULL THEN 1 ELSE 0 END) AS open_count
		FROM memberships WHERE user_id = ? AND conversation_id IN ? GROUP BY conversation_id`, actor.ID, ids).Scan(&ms).Error
	if err != nil {
		return nil, "", fmt.Errorf("chat: list conversations: %w", err)
	}
	byConv := make(map[string]int, len(ms))
	for i, m := range ms {
		byConv[m.ConversationID] = i
	}
	list = make([]Conversation, len(rows))
	for i, r := range rows {
		list[i] = Conversation{ID: r.ID, Title: r.Title, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt}
		if k, ok := byConv[r.ID]; ok {
			list[i].JoinGseq, list[i].Member = ms[k].JoinGseq, ms[k].OpenCount > 0
		}
	}
	return list, next, nil
}

// conversationList names the conversation list in its cursors.
const conversationList = "conversations"

// conversationPage selects up to limit+1 conversations of userID created
// before gseq after (0: the newest), newest first: one range on
// user_conversations' index (user_id, created_gseq), each row joined to
// its conversation by primary key.
func conversationPage(db *gorm.DB, userID string, after int64, limit int) *gorm.DB {
	q := db.Table("user_conversations uc").Select("c.*").
		Joins("JOIN conversations c ON c.id = uc.conversation_id").Where("uc.user_id = ?", userID)
	if after > 0 {
		q = q.Where("uc.created_gseq < ?", after)
	}
	return q.Order("uc.created_gseq DESC").Limit(limit + 1)
}

// listFor records, with userID's first membership of conv, that conv is on
// their conversation list. Every writer of memberships calls it (or does
// the same: Seed, chattest.Churn).
func listFor(tx *gorm.DB, userID, conv string, createdGseq int64) error {
	return tx.Create(&models.UserConversation{UserID: userID, ConversationID: conv, CreatedGseq: createdGseq}).Error
}

// membership reports whether userID is a member of conv now (open) and
// whether they ever were. A missing conversation is never-member.
func membership(tx *gorm.DB, conv, userID string) (open, ever bool, err error) {
	// One row however many intervals the user has had.
	var r struct{ Intervals, Open int64 }
	err = tx.Raw(`SELECT COUNT(*) AS intervals, COALESCE(SUM(CASE WHEN leave_gseq IS NULL THEN 1 ELSE 0 END), 0) AS open
		FROM memberships WHERE user_id = ? AND conversation_id = ?`, userID, conv).Scan(&r).Error
	if err != nil {
		return false, false, err
	}
	return r.Open > 0, r.Intervals > 0, nil
}

// requireMember fails unless actor is a member of conv now.
func requireMember(tx *gorm.DB, conv, actor string) error {
	open, ever, err := membership(tx, conv, actor)
	switch {
	case err != nil:
		return err
	case !ever:
		return ErrConversationNotFound
	case !open:
		return ErrNotMember
	}
	return nil
}

// AddMember adds userID to the conversation. Only a current member may
// add someone. It returns the new interval's join gseq.
func (s *Service) AddMember(ctx context.Context, actor Actor, conv, userID string) (int64, error) {
	var join int64
	err := s.write(ctx, 1, func(tx *gorm.DB, g int64) error {
		if err := requireMember(tx, conv, actor.ID); err != nil {
			return err
		}
		var n int64
		if err := tx.Model(&models.User{}).Where("id = ? AND active = ?", userID, true).Count(&n).Error; err != nil {
			return err
		}
		if n == 0 {
			return ErrUserNotFound
		}
		open, ever, err := membership(tx, conv, userID)
		if err != nil {
			return err
		}
		if open {
			return ErrAlreadyMember
		}
		join = g
		if err := tx.Create(&models.Membership{ConversationID: conv, UserID: userID, JoinGseq: g, AddedBy: actor.ID, CreatedAt: models.Time(s.now())}).Error; err != nil {
			return err
		}
		if ever {
			return nil
		}
		var created int64
		if err := tx.Raw("SELECT created_gseq FROM conversations WHERE id = ?", conv).Scan(&created).Error; err != nil {
			return err
		}
		return listFor(tx, userID, conv, created)
	})
	if err != nil {
		return 0, wrap("add member", err)
	}
	return join, nil
}

// RemoveMember ends userID's open membership interval. Members may remove
// themselves (leave); admins may remove anyone. It returns the leave gseq.
func (s *Service) RemoveMember(ctx context.Context, actor Actor, conv, userID string) (int64, error) {
	var leave int64
	err := s.write(ctx, 1, func(tx *gorm.DB, g int64) error {
		if actor.Admin {
			if err := conversationExists(tx, conv); err != nil {
				return err
			}
		} else {
			// A former member still sees the conversation, so they learn
			// why they may not act rather than that it does not exist.
			if _, ever, err := membership(tx, conv, actor.ID); err != nil {
				return err
			} else if !ever {
				return ErrConversationNotFound
			}
			if actor.ID != userID {
				return ErrNotSelf
			}
		}
		res := tx.Model(&models.Membership{}).
			Where("conversation_id = ? AND user_id = ? AND leave_gseq IS NULL", conv, userID).
			Update("leave_gseq", g)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return ErrMemberNotFound
		}
		leave = g
		return nil
	})
	if err != nil {
		return 0, wrap("remove member", err)
	}
	return leave, nil
}

func conversationExists(tx *gorm.DB, conv string) error {
	var n int64
	if err := tx.Model(&models.Conversation{}).Where("id = ?", conv).Count(&n).Error; err != nil {
		return err
	}
	if n == 0 {
		return ErrConversationNotFound
	}
	return nil
}

// Post adds a message from the actor, who must be a member now. Attachment
// ids must name the actor's files.
func (s *Service) Post(ctx context.Context, actor Actor, conv, body string, attachments []string) (Message, error) {
	if err := checkMessage(body, attachments); err != nil {
		return Message{}, err
	}
	if len(attachments) > 0 {
		// Checked before the write transaction: the counter lock is held
		// for as short a time as possible.
		if err := s.files.Owned(ctx, actor.ID, attachments); err != nil {
			return Message{}, err
		}
	}
	now := models.Time(s.now())
	msg := models.Message{ConversationID: conv, SenderID: actor.ID, Body: body, SentAt: now}
	err := s.write(ctx, 1, func(tx *gorm.DB, g int64) error {
		if err := requireMember(tx, conv, actor.ID); err != nil {
			return err
		}
		if err := tx.Exec("UPDATE conversations SET last_seq = last_seq + 1 WHERE id = ?", conv).Error; err != nil {
			return err
		}
		if err := tx.Raw("SELECT last_seq FROM conversations WHERE id = ?", conv).Scan(&msg.Seq).Error; err != nil {
			return err
		}
		msg.Gseq = g
		if err := tx.Create(&msg).Error; err != nil {
			return err
		}
		for i, f := range attachments {
			if err := tx.Create(&models.MessageAttachment{ConversationID: conv, Seq: msg.Seq, Position: i, FileID: f}).Error; err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Message{}, wrap("post", err)
	}
	return Message{Conversation: conv, Seq: msg.Seq, Gseq: msg.Gseq, Sender: actor.ID, Body: body,
		Attachments: append([]string{}, attachments...), SentAt: now}, nil
}

func checkMessage(body string, attachments []string) error {
	if len(body) > MaxBodyBytes {
		return errkind.New(errkind.TooLarge, "body_too_long", "a message body may have at most %d bytes", MaxBodyBytes)
	}
	if !utf8.ValidString(body) || strings.ContainsRune(body, 0) {
		return ErrInvalidBody
	}
	if strings.TrimSpace(body) == "" && len(attachments) == 0 {
		return errkind.Invalidf("empty_message", "a message needs a body or an attachment")
	}
	if len(attachments) > MaxAttachments {
		return errkind.Invalidf("too_many_attachments", "a message may have at most %d attachments", MaxAttachments)
	}
	seen := map[string]bool{}
	for _, f := range attachments {
		if f == "" || len(f) > 40 || seen[f] {
			return errkind.Invalidf("invalid_attachments", "attachments must be distinct file ids")
		}
		seen[f] = true
	}
	return nil
}

// alreadyRecalled ends a recall transaction without a new gseq.
type alreadyRecalled struct{ gseq int64 }

func (alreadyRecalled) Error() string { return "already recalled" }

// Recall withdraws message seq of conv. The sender or an admin may recall;
// recalling again is harmless and answers the first recall's gseq.
func (s *Service) Recall(ctx context.Context, actor Actor, conv string, seq int64) (int64, error) {
	var recall int64
	err := s.write(ctx, 1, func(tx *gorm.DB, g int64) error {
		var m models.Message
		err := tx.Where("conversation_id = ? AND seq = ?", conv, seq).Take(&m).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return ErrMessageNotFound
		}
		if err != nil {
			return err
		}
		if m.SenderID != actor.ID && !actor.Admin {
			if visible, err := canSee(tx, actor.ID, m); err != nil {
				return err
			} else if !visible {
				return ErrMessageNotFound
			}
			return ErrNotSender
		}
		var prev []int64
		if err := tx.Raw("SELECT recall_gseq FROM recalls WHERE conversation_id = ? AND seq = ?", conv, seq).Scan(&prev).Error; err != nil {
			return err
		}
		if len(prev) > 0 {
			return alreadyRecalled{prev[0]}
		}
		recall = g
		return tx.Create(&models.Recall{ConversationID: conv, Seq: seq, RecallGseq: g, RecalledBy: actor.ID, RecalledAt: models.Time(s.now())}).Error
	})
	var ar alreadyRecalled
	if errors.As(err, &ar) {
		return ar.gseq, nil
	}
	if err != nil {
		return 0, wrap("recall", err)
	}
	return recall, nil
}

// canSee reports whether userID's membership intervals cover message m.
func canSee(tx *gorm.DB, userID string, m models.Message) (bool, error) {
	var n int64
	err := tx.Model(&models.Membership{}).
		Where("conversation_id = ? AND user_id = ? AND join_gseq <= ? AND (leave_gseq IS NULL OR leave_gseq > ?)", m.ConversationID, userID, m.Gseq, m.Gseq).
		Count(&n).Error
	return n > 0, err
}

// Messages returns what the actor can see of conv now: messages inside
// their membership intervals with seq > after, oldest first, at most
// limit of them (0 means DefaultPageSize).
func (s *Service) Messages(ctx context.Context, actor Actor, conv string, after int64, limit int) ([]Message, error) {
	if limit == 0 {
		limit = DefaultPageSize
	}
	if limit < 0 || limit > MaxPageSize || after < 0 {
		return nil, errkind.Invalidf("invalid_page", "limit must be 1-%d and after a non-negative seq", MaxPageSize)
	}
	if _, ever, err := membership(s.db.WithContext(ctx), conv, actor.ID); err != nil {
		return nil, fmt.Errorf("chat: messages: %w", err)
	} else if !ever {
		return nil, ErrConversationNotFound
	}
	return ReadMessages(ctx, s.db, Range{Conversation: conv, Reader: Member(actor.ID), FromSeq: after + 1, Limit: limit})
}

// wrap adds context to unclassified errors and leaves classified ones as
// they are, so their client-safe detail stays intact.
func wrap(op string, err error) error {
	if errkind.KindOf(err) != nil {
		return err
	}
	return fmt.Errorf("chat: %s: %w", op, err)
}

// CanSeeFile reports whether userID can currently see a message that
// attaches fileID: one inside one of their membership intervals, not
// recalled. The download proxy asks this on every request for a file the
// user does not own, so leaving a conversation or a recall takes effect at
// once.
func (s *Service) CanSeeFile(ctx context.Context, userID, fileID string) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Raw(`
		SELECT COUNT(*) FROM message_attachments a
		JOIN messages m ON m.conversation_id = a.conversation_id AND m.seq = a.seq
		JOIN memberships ms ON ms.conversation_id = a.conversation_id AND ms.user_id = ?
			AND m.gseq >= ms.join_gseq AND (ms.leave_gseq IS NULL OR m.gseq < ms.leave_gseq)
		LEFT JOIN recalls r ON r.conversation_id = a.conversation_id AND r.seq = a.seq
		WHERE a.file_id = ? AND r.seq IS NULL`, userID, fileID).Scan(&n).Error
	if err != nil {
		return false, fmt.Errorf("chat: can see file: %w", err)
	}
	return n > 0, nil
}
