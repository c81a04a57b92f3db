package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/users"
)

// The guards other routes build on, mounted on test routes: requireScope
// is for service keys alone, userOrScope lets users through as well.
func TestScopeGuards(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	us := testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour}))
	reg := prometheus.NewRegistry()
	s, err := New(Deps{Log: testenv.Logger(t), Users: us, Gatherer: reg, Registerer: reg, MaxBodyBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(c *gin.Context) { c.Status(http.StatusNoContent) }
	s.engine.GET("/t/scope", s.authenticate(), requireScope(users.ScopeTicketsCreate), ok)
	s.engine.GET("/t/user-or-scope", s.authenticate(), userOrScope(users.ScopeGrantsCreate), ok)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()

	ctx := t.Context()
	_, userTok, _ := us.Create(ctx, "alice", false)
	_, ticketsKey, _ := us.CreateServiceKey(ctx, "tickets", []string{users.ScopeTicketsCreate})
	_, grantsKey, _ := us.CreateServiceKey(ctx, "grants", []string{users.ScopeGrantsCreate})
	for _, c := range []struct {
		path, token string
		status      int
	}{
		{"/t/scope", ticketsKey, 204},
		{"/t/scope", grantsKey, 403},
		{"/t/scope", userTok, 403},
		{"/t/scope", "", 401},
		{"/t/user-or-scope", grantsKey, 204},
		{"/t/user-or-scope", ticketsKey, 403},
		{"/t/user-or-scope", userTok, 204},
		{"/t/user-or-scope", "", 401},
	} {
		req, _ := http.NewRequest("GET", ts.URL+c.path, nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s with %.8s…: %d, want %d", c.path, c.token, resp.StatusCode, c.status)
		}
	}
}
