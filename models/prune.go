package models

import (
	"context"

	"gorm.io/gorm"
)

// Pruning deletes at most PruneBatch rows per statement, so no statement
// holds locks (or grows the undo log) for long, and at most PruneBatches
// statements per call; a larger backlog (after an outage of the pruning
// job) is worked off over the next runs.
const (
	PruneBatch   = 5000
	PruneBatches = 200
)

// DeleteInBatches deletes the rows of model matching where, PruneBatch at
// a time by primary key (column key, of type K), and returns how many it
// deleted. It selects the keys first and deletes by key, because SQLite
// has no DELETE … LIMIT and MySQL refuses LIMIT in an IN subquery.
func DeleteInBatches[K int64 | string](ctx context.Context, db *gorm.DB, model any, key, where string, args ...any) (int64, error) {
	db = db.WithContext(ctx)
	var total int64
	for range PruneBatches {
		var ids []K
		if err := db.Model(model).Where(where, args...).Order(key).Limit(PruneBatch).Pluck(key, &ids).Error; err != nil {
			return total, err
		}
		if len(ids) == 0 {
			return total, nil
		}
		res := db.Where(key+" IN ?", ids).Delete(model)
		if res.Error != nil {
			return total, res.Error
		}
		total += res.RowsAffected
		if len(ids) < PruneBatch {
			return total, nil
		}
	}
	return total, nil
}
