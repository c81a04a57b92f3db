package page_test

import (
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/internal/page"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// readAll pages through userID's exports, limit at a time, calling
// between after each page, and returns the ids in the order read.
func readAll(t *testing.T, db *gorm.DB, userID string, limit int, between func(n int)) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for n := 0; n < 100; n++ {
		q, err := page.NewestFirst(db.Where("user_id = ?", userID), "exports", cursor, limit)
		if err != nil {
			t.Fatal(err)
		}
		var rows []models.Export
		if err := q.Find(&rows).Error; err != nil {
			t.Fatal(err)
		}
		rows, next := page.Cut("exports", rows, limit, func(e models.Export) (time.Time, string) { return e.CreatedAt, e.ID })
		if len(rows) > limit {
			t.Fatalf("page of %d rows, limit %d", len(rows), limit)
		}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		if next == "" {
			return ids
		}
		cursor = next
		between(n)
	}
	t.Fatal("no last page after 100 pages")
	return nil
}

func export(id, user string, at time.Time) models.Export {
	return models.Export{ID: id, UserID: user, IdempotencyKey: id, Fingerprint: "f", Scope: "all", State: "queued", CreatedAt: at, UpdatedAt: at}
}

// Keyset pages are complete and never repeat, in (created_at, id) order
// newest first, also when rows share a created_at and when rows are
// inserted between two pages; each page is one range on the index.
func TestNewestFirstPages(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		base := models.Time(time.Now())
		var rows []models.Export
		var want []string
		for i := range 23 {
			// Three rows per instant, so pages end inside a tie.
			at := base.Add(time.Duration(i/3) * time.Millisecond)
			id := fmt.Sprintf("exp_%02d", i)
			rows = append(rows, export(id, "usr_a", at))
		}
		for i := 22; i >= 0; i-- {
			want = append(want, fmt.Sprintf("exp_%02d", i))
		}
		for u := range 30 { // other users' rows, so usr_a's are a small part
			for i := range 20 {
				rows = append(rows, export(fmt.Sprintf("exp_u%02d_%02d", u, i), fmt.Sprintf("usr_%02d", u), base.Add(time.Duration(i)*time.Millisecond)))
			}
		}
		if err := db.CreateInBatches(rows, 200).Error; err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int{1, 2, 3, 5, 23, 100} {
			if got := readAll(t, db.DB, "usr_a", limit, func(int) {}); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("limit %d: %v, want %v", limit, got, want)
			}
		}
		// Rows inserted between pages, newest (as new rows are) or anywhere
		// in the order, never make a row of the list repeat or go missing.
		got := readAll(t, db.DB, "usr_a", 4, func(n int) {
			later := export(fmt.Sprintf("exp_new%d", n), "usr_a", base.Add(time.Hour))
			tie := export(fmt.Sprintf("exp_11_%d", n), "usr_a", base.Add(3*time.Millisecond)) // between exp_11 and exp_12
			if err := db.Create([]models.Export{later, tie}).Error; err != nil {
				t.Fatal(err)
			}
		})
		var old []string
		seen := map[string]bool{}
		for _, id := range got {
			if seen[id] {
				t.Fatalf("%s read twice: %v", id, got)
			}
			seen[id] = true
			if len(id) == 6 {
				old = append(old, id)
			} else if id[4:7] == "new" {
				t.Fatalf("%s, newer than the first page, showed on a later one", id)
			}
		}
		if fmt.Sprint(old) != fmt.Sprint(want) {
			t.Fatalf("with inserts between pages: %v, want %v", old, want)
		}

		// The files list pages the same way, on ix_files_user.
		var files []models.File
		for u := range 30 {
			for i := range 20 {
				id := fmt.Sprintf("fil_%02d_%02d", u, i)
				files = append(files, models.File{ID: id, UserID: fmt.Sprintf("usr_%02d", u), BlobID: "blb_x", UploadID: "upl_" + id,
					Name: "f", ContentType: "x", SHA256: "s", CreatedAt: base.Add(time.Duration(i) * time.Millisecond)})
			}
		}
		if err := db.CreateInBatches(files, 200).Error; err != nil {
			t.Fatal(err)
		}

		testenv.Analyze(t, db, "exports", "files")
		for _, q := range []struct {
			list   string
			model  any
			cursor string
		}{
			{"exports", &models.Export{}, ""},
			{"exports", &models.Export{}, page.EncodeTimeID("exports", base.Add(3*time.Millisecond), "exp_10")},
			{"files", &models.File{}, ""},
			{"files", &models.File{}, page.EncodeTimeID("files", base.Add(7*time.Millisecond), "fil_03_07")},
		} {
			sql := db.ToSQL(func(tx *gorm.DB) *gorm.DB {
				pq, err := page.NewestFirst(tx.Model(q.model).Where("user_id = ?", "usr_03"), q.list, q.cursor, 10)
				if err != nil {
					t.Fatal(err)
				}
				return pq.Find(&[]map[string]any{})
			})
			plan, bad := testenv.Explain(t, db, sql)
			t.Logf("%s\n    %s", sql, plan)
			if bad {
				t.Errorf("the page query scans or sorts: %s", plan)
			}
		}
	})
}
