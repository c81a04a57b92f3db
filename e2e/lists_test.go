package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/ferry-io/ferry/client"
)

// listAll follows next through every page of path, limit at a time, and
// returns the ids in the order read, and the number of pages.
func listAll(t *testing.T, f *Ferry, token, path, items, id string, limit int) ([]string, int) {
	t.Helper()
	var ids []string
	url := fmt.Sprintf("%s?limit=%d", path, limit)
	for pages := 1; pages <= 50; pages++ {
		r := f.Do("GET", url, token, nil)
		want(t, r, 200, "")
		var body map[string]any
		r.JSON(t, &body)
		list, _ := body[items].([]any)
		if len(list) > limit {
			t.Fatalf("%s: a page of %d, limit %d", url, len(list), limit)
		}
		for _, it := range list {
			ids = append(ids, it.(map[string]any)[id].(string))
		}
		next, present := body["next"]
		if !present {
			t.Fatalf("%s: no next member: %s", url, r.Body)
		}
		if next == nil {
			return ids, pages
		}
		url = fmt.Sprintf("%s?limit=%d&cursor=%s", path, limit, next)
	}
	t.Fatalf("%s: no last page in 50", path)
	return nil, 0
}

// GET /conversations, /exports and /files page with limit and cursor and
// answer next (null on the last page); bad paging input is a 400 problem.
// GET /exports used to return the newest 100 whatever limit said, and
// GET /conversations everything.
func TestListEndpointsPage(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := startWithAdmin(t, mysql, nil)
		_, alice := f.CreateUser("alice", false)
		ac := f.Client(alice)
		dir := t.TempDir()
		var convs, exports, files []string // newest first
		for i := range 5 {
			var c struct{ ID string }
			r := f.Do("POST", "/conversations", alice, map[string]any{"title": fmt.Sprint("c", i)})
			want(t, r, 201, "")
			r.JSON(t, &c)
			convs = append([]string{c.ID}, convs...)
			var x struct {
				JobID string `json:"job_id"`
			}
			r = f.Do("POST", "/exports", alice, map[string]any{"scope": "conv:" + c.ID}, "Idempotency-Key", fmt.Sprint("k", i))
			want(t, r, 202, "")
			r.JSON(t, &x)
			exports = append([]string{x.JobID}, exports...)
			path, _ := writeRandomFile(t, dir, fmt.Sprint("f", i), 1000+i)
			up, err := ac.UploadFile(context.Background(), path, client.UploadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			files = append([]string{up.FileID}, files...)
		}
		for _, l := range []struct {
			path, items, id string
			want            []string
		}{
			{"/conversations", "conversations", "id", convs},
			{"/exports", "exports", "job_id", exports},
			{"/files", "files", "file_id", files},
		} {
			got, pages := listAll(t, f, alice, l.path, l.items, l.id, 2)
			if fmt.Sprint(got) != fmt.Sprint(l.want) || pages != 3 {
				t.Errorf("%s by 2: %d pages %v, want 3 pages %v", l.path, pages, got, l.want)
			}
			if got, pages := listAll(t, f, alice, l.path, l.items, l.id, 100); fmt.Sprint(got) != fmt.Sprint(l.want) || pages != 1 {
				t.Errorf("%s by 100: %d pages %v", l.path, pages, got)
			}
			other := "/exports"
			if l.path == "/exports" {
				other = "/files"
			}
			var first struct{ Next string }
			f.Do("GET", other+"?limit=1", alice, nil).JSON(t, &first)
			for _, q := range []struct{ query, code string }{
				{"limit=0", "invalid_limit"},
				{"limit=1001", "invalid_limit"},
				{"limit=-1", "invalid_limit"},
				{"limit=two", "invalid_limit"},
				{"limit=1&limit=2", "invalid_limit"},
				{"cursor=bogus", "invalid_cursor"},
				{"cursor=" + first.Next, "invalid_cursor"}, // another list's
			} {
				r := f.Do("GET", l.path+"?"+q.query, alice, nil)
				want(t, r, 400, q.code)
				if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
					t.Errorf("%s?%s: content type %q", l.path, q.query, ct)
				}
			}
		}
	})
}
