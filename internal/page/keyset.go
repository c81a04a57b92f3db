package page

import (
	"time"

	"gorm.io/gorm"
)

// NewestFirst pages q, a query of one caller's rows of a table with
// created_at and a unique id, newest first: it orders q by (created_at,
// id) descending, starts it after cursor, and reads limit+1 rows so that
// Cut can tell whether another page follows. list names the list in its
// cursors. The table needs an index on (its filter columns, created_at,
// id) for each page to be one index range.
func NewestFirst(q *gorm.DB, list, cursor string, limit int) (*gorm.DB, error) {
	if cursor != "" {
		at, id, err := DecodeTimeID(list, cursor)
		if err != nil {
			return nil, err
		}
		// The first term is what bounds the index range (MySQL makes no
		// range of an OR); the second breaks ties on created_at.
		q = q.Where("created_at <= ? AND (created_at < ? OR id < ?)", at, at, id)
	}
	return q.Order("created_at DESC, id DESC").Limit(limit + 1), nil
}

// Cut trims rows read by NewestFirst to limit and returns the cursor of
// the next page, "" when this is the last. key gives a row's (created_at,
// id).
func Cut[T any](list string, rows []T, limit int, key func(T) (time.Time, string)) ([]T, string) {
	if len(rows) <= limit {
		return rows, ""
	}
	rows = rows[:limit]
	at, id := key(rows[limit-1])
	return rows, EncodeTimeID(list, at, id)
}
