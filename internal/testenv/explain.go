package testenv

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ferry-io/ferry/models"
)

// Explain returns the plan db chooses for q, one step per part, and
// whether any step reads a whole table or sorts outside an index: on
// SQLite a SCAN or a TEMP B-TREE, on MySQL a type ALL, a step without a
// key, a filesort or a temporary table. Plans follow the statistics, so
// give the tables realistic contents (the caller's rows a small part of
// them) and ANALYZE them first.
func Explain(t testing.TB, db *DB, q string, args ...any) (plan string, bad bool) {
	t.Helper()
	var steps []string
	if db.Dialect == models.SQLite {
		var rows []struct{ Detail string }
		if err := db.Raw("EXPLAIN QUERY PLAN "+q, args...).Scan(&rows).Error; err != nil {
			t.Fatalf("explain %s: %v", q, err)
		}
		for _, r := range rows {
			steps = append(steps, r.Detail)
			bad = bad || strings.HasPrefix(r.Detail, "SCAN ") || strings.Contains(r.Detail, "TEMP B-TREE")
		}
		return strings.Join(steps, "; "), bad
	}
	var rows []struct {
		Table, Type, Extra string
		Key                *string
	}
	if err := db.Raw("EXPLAIN "+q, args...).Scan(&rows).Error; err != nil {
		t.Fatalf("explain %s: %v", q, err)
	}
	for _, r := range rows {
		key := "-"
		if r.Key != nil {
			key = *r.Key
		}
		steps = append(steps, fmt.Sprintf("%s: %s on %s (%s)", r.Table, r.Type, key, r.Extra))
		bad = bad || r.Type == "ALL" || r.Key == nil || strings.Contains(r.Extra, "filesort") || strings.Contains(r.Extra, "temporary")
	}
	return strings.Join(steps, "; "), bad
}

// Analyze refreshes the planner's statistics of tables.
func Analyze(t testing.TB, db *DB, tables ...string) {
	t.Helper()
	q := "ANALYZE"
	if db.Dialect == models.MySQL {
		q = "ANALYZE TABLE " + strings.Join(tables, ", ")
	}
	if err := db.Exec(q).Error; err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
