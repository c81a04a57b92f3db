package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/users"
)

// Every error kind has its status: a kind added without one would answer
// 500 for what is the client's fault.
func TestEveryKindHasAStatus(t *testing.T) {
	for _, k := range errkind.Kinds() {
		st, ok := statusOf[k]
		if !ok || st < 400 || st > 599 || st == 500 {
			t.Errorf("kind %q has status %d (listed: %v)", k, st, ok)
		}
	}
	if len(statusOf) != len(errkind.Kinds()) {
		t.Errorf("%d statuses for %d kinds", len(statusOf), len(errkind.Kinds()))
	}
}

// A handler that returns a raw error, or a classified one wrapping a
// cause, through the real router: the client gets a problem document with
// the request id and none of the error's text.
func TestInternalErrorsStayInternal(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	reg := prometheus.NewRegistry()
	s, err := New(Deps{Log: testenv.Logger(t), Users: testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour})), Gatherer: reg, Registerer: reg,
		MaxBodyBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	const secret = "dial tcp 10.0.0.7:3306: password=hunter2"
	s.engine.GET("/t/raw", h(func(c *gin.Context) error { return fmt.Errorf("load user: %s", secret) }))
	s.engine.GET("/t/wrapped", h(func(c *gin.Context) error {
		return &errkind.Error{Kind: errkind.Unavailable, Code: "database_unavailable", Detail: "the database is unavailable; retry later", Err: errors.New(secret)}
	}))
	s.engine.GET("/t/panic", h(func(c *gin.Context) error { panic(secret) }))
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	for path, want := range map[string]int{"/t/raw": 500, "/t/wrapped": 503, "/t/panic": 500} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p struct {
			Status    int    `json:"status"`
			Code      string `json:"code"`
			RequestID string `json:"request_id"`
		}
		if resp.StatusCode != want || json.Unmarshal(body, &p) != nil || p.Status != want || p.RequestID == "" ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			t.Fatalf("%s: %d %s %s; want a %d problem with a request id", path, resp.StatusCode, resp.Header.Get("Content-Type"), body, want)
		}
		if strings.Contains(string(body), "hunter2") || strings.Contains(string(body), "10.0.0.7") || strings.Contains(string(body), "load user") {
			t.Fatalf("%s: the answer carries the internal error: %s", path, body)
		}
	}
}
