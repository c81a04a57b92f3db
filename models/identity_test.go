package models_test

import (
	"context"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// textColumns are the MySQL columns allowed a text collation: free text,
// values SQL never compares, and enumerations compared only with ferry's
// constants. Everything else (ids, references, keys, hashes, names) must
// compare byte for byte: utf8mb4_bin pads with spaces, so 'abc' = 'abc '.
var textColumns = map[string]bool{
	"schema_migrations.name":                true,
	"jobs.kind":                             true,
	"jobs.state":                            true,
	"jobs.payload":                          true,
	"jobs.last_error":                       true,
	"outbox.type":                           true,
	"outbox.payload":                        true,
	"uploads.file_name":                     true,
	"uploads.content_type":                  true,
	"uploads.s3_upload_id":                  true,
	"uploads.state":                         true,
	"uploads.client_etags":                  true,
	"uploads.error":                         true,
	"upload_parts.etag":                     true,
	"files.name":                            true,
	"files.content_type":                    true,
	"upload_challenges.file_name":           true,
	"upload_challenges.content_type":        true,
	"upload_challenges.ranges":              true,
	"upload_challenges.nonce":               true,
	"uploads.checksum_algorithm":            true,
	"uploads.full_checksum":                 true,
	"blobs.s3_etag":                         true,
	"webhook_secrets.secret":                true,
	"conversations.title":                   true,
	"messages.body":                         true,
	"exports.scope":                         true,
	"exports.state":                         true,
	"exports.error":                         true,
	"webhook_subscriptions.url":             true,
	"webhook_subscriptions.events":          true,
	"webhook_subscriptions.secret":          true,
	"webhook_subscriptions.disabled_reason": true,
	"webhook_deliveries.event_type":         true,
	"webhook_deliveries.state":              true,
	"webhook_deliveries.last_error":         true,
	"webhook_attempts.error":                true,
	"download_log.method":                   true,
	"download_log.code":                     true,
	"download_log.range_header":             true,
	"download_log.user_agent":               true,
	"download_log.request_id":               true,
	"service_keys.name":                     true,
	"service_keys.scopes":                   true,
	"users.display_name":                    true,
	"uploads.metadata":                      true, // JSON documents, read whole
	"uploads.client_metadata":               true,
	"files.metadata":                        true,
	"files.client_metadata":                 true,
	"upload_challenges.client_metadata":     true,
	"upload_tickets.metadata":               true,
	"upload_tickets.content_types":          true,
}

// After the migrations, every MySQL column with a text collation is one
// of textColumns: an id, key, hash or name column in a new table must use
// {{exact N}} (or be listed here with the reason it is not compared).
func TestIdentityColumnsAreExact(t *testing.T) {
	db := testenv.NewDB(t, models.MySQL)
	var cols []struct{ TableName, ColumnName, CollationName string }
	err := db.WithContext(context.Background()).Raw(`SELECT TABLE_NAME AS table_name, COLUMN_NAME AS column_name, COLLATION_NAME AS collation_name
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND COLLATION_NAME IS NOT NULL
		ORDER BY TABLE_NAME, ORDINAL_POSITION`).Scan(&cols).Error
	if err != nil {
		t.Fatal(err)
	}
	if len(cols) == 0 {
		t.Fatal("no text columns at all: the query is wrong")
	}
	for _, c := range cols {
		if name := c.TableName + "." + c.ColumnName; !textColumns[name] {
			t.Errorf("%s has collation %s: an identity column must compare byte for byte (VARBINARY, {{exact N}})", name, c.CollationName)
		}
	}
}
