package chattest

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/models"
)

// Files is a fixed set of files, file id → owner, standing in for the
// uploads feature's file index.
type Files map[string]string

// Owned returns a NotFound error naming the first id userID does not own.
func (f Files) Owned(_ context.Context, userID string, ids []string) error {
	for _, id := range ids {
		if f[id] != userID {
			return errkind.New(errkind.NotFound, "file_not_found", "no such file: %s", id)
		}
	}
	return nil
}

// Churn writes n membership intervals of userID in conv, as n rounds of
// AddMember, Post by userID, RemoveMember and Post by other would through
// chat.Service, but in one transaction of multi-row INSERTs, so thousands
// of intervals take a second rather than minutes. gseqs come from the chat
// counter as every chat write's do. userID must not be a member of conv
// when it starts; other must be one throughout. It returns the seqs of the
// messages userID wrote (the ones their intervals show), oldest first.
func Churn(ctx context.Context, db *gorm.DB, conv, userID, other string, n int) ([]int64, error) {
	var seqs []int64
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("UPDATE chat_counter SET value = value + ? WHERE id = 1", 4*n).Error; err != nil {
			return err
		}
		var last, seq int64
		if err := tx.Raw("SELECT value FROM chat_counter WHERE id = 1").Scan(&last).Error; err != nil {
			return err
		}
		if err := tx.Raw("SELECT last_seq FROM conversations WHERE id = ?", conv).Scan(&seq).Error; err != nil {
			return err
		}
		now := models.Time(time.Now())
		g := last - int64(4*n)
		var members []models.Membership
		var messages []models.Message
		for i := range n {
			leave := g + 3
			members = append(members, models.Membership{ConversationID: conv, UserID: userID, JoinGseq: g + 1, LeaveGseq: &leave, AddedBy: other, CreatedAt: now})
			messages = append(messages,
				models.Message{ConversationID: conv, Seq: seq + 1, Gseq: g + 2, SenderID: userID, Body: fmt.Sprintf("in %d", i), SentAt: now},
				models.Message{ConversationID: conv, Seq: seq + 2, Gseq: g + 4, SenderID: other, Body: fmt.Sprintf("between %d", i), SentAt: now})
			seqs = append(seqs, seq+1)
			seq, g = seq+2, g+4
		}
		if err := tx.CreateInBatches(members, 400).Error; err != nil {
			return err
		}
		// On userID's conversation list, as chat.Service's first join puts it.
		var created int64
		if err := tx.Raw("SELECT created_gseq FROM conversations WHERE id = ?", conv).Scan(&created).Error; err != nil {
			return err
		}
		err := tx.Clauses(clause.OnConflict{DoNothing: true}).
			Create(&models.UserConversation{UserID: userID, ConversationID: conv, CreatedGseq: created}).Error
		if err != nil {
			return err
		}
		if err := tx.CreateInBatches(messages, 400).Error; err != nil {
			return err
		}
		return tx.Exec("UPDATE conversations SET last_seq = ? WHERE id = ?", seq, conv).Error
	})
	return seqs, err
}
