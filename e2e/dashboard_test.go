package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metricsql"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// dashboardExprs returns every PromQL expression in the Grafana dashboard
// at path, by panel title.
func dashboardExprs(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string
		Targets []struct{ Expr string }
		Panels  json.RawMessage // a collapsed row's own panels
	}
	var dash struct{ Panels []panel }
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string][]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out[p.Title] = append(out[p.Title], tg.Expr)
			}
			var inner []panel
			if len(p.Panels) > 0 && json.Unmarshal(p.Panels, &inner) == nil {
				walk(inner)
			}
		}
	}
	walk(dash.Panels)
	return out
}

// metricNames parses a PromQL expression (Grafana's $__rate_interval
// stands for a range, as Grafana substitutes it) and returns the metric
// names it selects.
func metricNames(expr string) ([]string, error) {
	e, err := metricsql.Parse(strings.ReplaceAll(expr, "$__rate_interval", "5m"))
	if err != nil {
		return nil, err
	}
	var names []string
	metricsql.VisitAll(e, func(x metricsql.Expr) {
		me, ok := x.(*metricsql.MetricExpr)
		if !ok {
			return
		}
		for _, lfs := range me.LabelFilterss {
			for _, lf := range lfs {
				if lf.Label == "__name__" && !lf.IsRegexp && !lf.IsNegative && !slices.Contains(names, lf.Value) {
					names = append(names, lf.Value)
				}
			}
		}
	})
	return names, nil
}

var seriesName = regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]`)

// Issue 16: the Grafana dashboard (deploy/grafana/ferry.json) queries
// only metrics a running ferry exposes. Every PromQL expression in it
// parses, and every metric it names is on /metrics after traffic that
// touches each panel: uploads (one instant, with a proof), a download, an
// export, a webhook delivery, a refused token, and a prune of an expired
// session. A renamed metric fails here.
func TestDashboardQueriesExistingMetrics(t *testing.T) {
	t.Parallel()
	exprs := dashboardExprs(t, filepath.Join(repoRoot(), "deploy", "grafana", "ferry.json"))
	named := map[string][]string{} // metric -> panels
	for title, es := range exprs {
		for _, e := range es {
			names, err := metricNames(e)
			if err != nil {
				t.Errorf("panel %q: %q does not parse: %v", title, e, err)
				continue
			}
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no metric", title, e)
			}
			for _, n := range names {
				named[n] = append(named[n], title)
			}
		}
	}
	if len(named) < 20 {
		t.Fatalf("the dashboard names %d metrics; the parser found too few to trust: %v", len(named), named)
	}

	// An expired session in the database before ferry starts: the
	// session pruning job, which runs at start-up, deletes it.
	dir := t.TempDir()
	env := map[string]string{"FERRY_S3_EMBEDDED_ADDR": testenv.FreeAddr(t), "FERRY_ADDR": testenv.FreeAddr(t),
		"FERRY_WEBHOOK_ALLOW_PRIVATE": "true"}
	if code, out := runFerry(t, dir, envList(env), "migrate"); code != 0 {
		t.Fatalf("ferry migrate exited %d:\n%s", code, out)
	}
	db, err := models.Open(context.Background(), models.SQLite, filepath.Join(dir, "ferry-data", "ferry.db"), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	old := models.Time(time.Now().Add(-48 * time.Hour))
	if err := db.Create(&models.Session{Hash: "expired-" + testenv.RandomHex(8), UserID: "usr_gone", CreatedAt: old, ExpiresAt: old}).Error; err != nil {
		t.Fatal(err)
	}
	if s, err := db.DB(); err == nil {
		s.Close()
	}

	hooks := newEventCounter(t)
	f := Start(t, Options{Dir: dir, Env: env})
	want201 := func(r Response) { t.Helper(); want(t, r, 201, "") }
	want201(f.Do("POST", "/admin/webhooks", f.Token, map[string]any{"url": hooks.srv.URL + "/h", "events": []string{"upload.completed", "export.completed"}}))
	_, alice := f.CreateUser("alice", false)
	_, bob := f.CreateUser("bob", false)
	path, sum := randomFile(t, "d.bin", 100<<10)
	fileID := uploadWithCLI(t, f, alice, path)
	// Bob claims Alice's content and answers its challenge wrongly.
	var ch struct {
		State     string
		Challenge struct {
			ID     string
			Ranges []struct{ Offset, Length int64 }
		}
	}
	// Only verified content is deduplicated: wait until ferry has hashed
	// Alice's file.
	var verified struct {
		Verified bool `json:"sha256_verified"`
	}
	for deadline := time.Now().Add(30 * time.Second); !verified.Verified && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		f.Do("GET", "/files/"+fileID, alice, nil).JSON(t, &verified)
	}
	f.Do("POST", "/uploads", bob, map[string]any{"file_name": "d.bin", "size": 100 << 10, "sha256": sum}).JSON(t, &ch)
	if ch.State != "proof_required" {
		t.Fatalf("bob's claim of alice's content: state %q, want proof_required", ch.State)
	}
	wrong := make([]string, len(ch.Challenge.Ranges))
	for i := range wrong {
		wrong[i] = sum
	}
	want(t, f.Do("POST", "/uploads/proofs/"+ch.Challenge.ID, bob, map[string]any{"digests": wrong}), 403, "proof_failed")
	var file struct {
		DownloadURL string `json:"download_url"`
	}
	f.Do("GET", "/files/"+fileID, alice, nil).JSON(t, &file)
	want(t, f.Do("GET", linkPath(t, file.DownloadURL), alice, nil), 200, "")
	want(t, f.Do("GET", "/me", "fry_not-a-token", nil), 401, "")
	var conv struct{ ID string }
	f.Do("POST", "/conversations", alice, map[string]any{"title": "c"}).JSON(t, &conv)
	want201(f.Do("POST", "/conversations/"+conv.ID+"/messages", alice, map[string]any{"body": "hi"}))
	var job struct {
		JobID string `json:"job_id"`
		State string
	}
	f.Do("POST", "/exports", alice, map[string]any{"scope": "all"}, "Idempotency-Key", "dash").JSON(t, &job)
	for deadline := time.Now().Add(60 * time.Second); job.State != "done" && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		f.Do("GET", "/exports/"+job.JobID, alice, nil).JSON(t, &job)
	}
	if job.State != "done" {
		t.Fatalf("export is %s, want done", job.State)
	}

	// Wait (bounded) until every metric is there: the webhook delivery
	// and the pruning run in the background.
	var missing []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		body := string(f.Do("GET", "/metrics", "", nil).Body)
		have := map[string]bool{}
		for _, m := range seriesName.FindAllStringSubmatch(body, -1) {
			have[m[1]] = true
		}
		missing = missing[:0]
		for n, panels := range named {
			if !have[n] {
				missing = append(missing, fmt.Sprintf("%s (panels %q)", n, panels))
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Fatalf("the dashboard queries metrics ferry does not expose:\n%s", strings.Join(missing, "\n"))
	}
	t.Logf("%d panels, %d metrics, all exposed", len(exprs), len(named))
}
