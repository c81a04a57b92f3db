package models_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// The migration that moves rotated-out secrets into webhook_secrets keeps
// the one a subscription had, with its expiry, and drops the old columns.
func TestWebhookSecretsMigrationKeepsThePreviousSecret(t *testing.T) {
	for _, dialect := range []string{models.SQLite, models.MySQL} {
		t.Run(dialect, func(t *testing.T) {
			dsn := filepath.Join(t.TempDir(), "ferry.db")
			if dialect == models.MySQL {
				dsn = testenv.MySQLDatabase(t)
			}
			db, err := models.Open(context.Background(), dialect, dsn, testenv.Logger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s, _ := db.DB(); s.Close() })
			migs, err := models.Migrations()
			if err != nil {
				t.Fatal(err)
			}
			until := models.Time(time.Now().Add(20 * time.Hour))
			found := false
			for _, m := range migs {
				if m.Name == "webhook_secrets" {
					found = true
					now := models.Time(time.Now())
					for _, row := range []struct {
						id   string
						prev any
						at   any
					}{{"whk_rotated", "whsec_b2xk", until}, {"whk_plain", nil, nil}} {
						if err := db.Exec(`INSERT INTO webhook_subscriptions (id, url, events, secret, previous_secret, previous_until, active, created_at, updated_at)
							VALUES (?, 'http://x.test/', 'upload.completed', 'whsec_bmV3', ?, ?, TRUE, ?, ?)`, row.id, row.prev, row.at, now, now).Error; err != nil {
							t.Fatal(err)
						}
					}
				}
				stmts, err := m.Render(dialect)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range stmts {
					if err := db.Exec(s).Error; err != nil {
						t.Fatalf("%04d_%s: %v", m.Version, m.Name, err)
					}
				}
			}
			if !found {
				t.Fatal("no webhook_secrets migration")
			}
			var rows []models.WebhookSecret
			if err := db.Find(&rows).Error; err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 || rows[0].SubscriptionID != "whk_rotated" || rows[0].Secret != "whsec_b2xk" || !rows[0].ExpiresAt.Equal(until) {
				t.Fatalf("webhook_secrets = %+v; want the one previous secret until %s", rows, until)
			}
			if db.Migrator().HasColumn(&models.WebhookSubscription{}, "previous_secret") {
				t.Fatal("previous_secret is still a column")
			}
		})
	}
}
