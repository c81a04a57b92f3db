package models

import "time"

// Conversation is a chat room. LastSeq is the seq of its newest message;
// the next message takes LastSeq+1.
type Conversation struct {
	ID          string `gorm:"primaryKey"`
	Title       string
	CreatedBy   string
	CreatedGseq int64
	LastSeq     int64
	CreatedAt   time.Time
}

// Membership is one interval [JoinGseq, LeaveGseq) during which a user was
// a member of a conversation. LeaveGseq is nil while the interval is open.
type Membership struct {
	ID             int64 `gorm:"primaryKey"`
	ConversationID string
	UserID         string
	JoinGseq       int64
	LeaveGseq      *int64
	AddedBy        string
	CreatedAt      time.Time
}

// Message is one chat message: Seq orders it within its conversation,
// Gseq among every chat write.
type Message struct {
	ConversationID string `gorm:"primaryKey"`
	Seq            int64  `gorm:"primaryKey"`
	Gseq           int64
	SenderID       string
	Body           string
	SentAt         time.Time
}

// MessageAttachment links a message to a file, in the order given.
type MessageAttachment struct {
	ConversationID string `gorm:"primaryKey"`
	Seq            int64  `gorm:"primaryKey"`
	Position       int    `gorm:"primaryKey"`
	FileID         string
}

// Recall withdraws a message as of RecallGseq.
type Recall struct {
	ConversationID string `gorm:"primaryKey"`
	Seq            int64  `gorm:"primaryKey"`
	RecallGseq     int64
	RecalledBy     string
	RecalledAt     time.Time
}

// ChatCounter is the single row (ID 1) that allocates gseqs.
type ChatCounter struct {
	ID    int `gorm:"primaryKey"`
	Value int64
}

// TableName keeps GORM from guessing "chat_counters".
func (ChatCounter) TableName() string { return "chat_counter" }

// UserConversation is one conversation a user is or ever was a member of,
// however many intervals they had in it: the rows GET /conversations
// pages through, in the order of CreatedGseq (the conversation's).
type UserConversation struct {
	UserID         string `gorm:"primaryKey"`
	ConversationID string `gorm:"primaryKey"`
	CreatedGseq    int64
}
