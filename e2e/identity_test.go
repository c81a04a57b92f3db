package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// ferryCLI runs a one-shot ferry subcommand on f's configuration and
// returns its combined output and exit code.
func ferryCLI(t *testing.T, f *Ferry, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(ferryBinary(t), args...)
	cmd.Dir = f.Dir
	cmd.Env = append(cleanEnv(), f.Env...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("ferry %v: %v", args, err)
	}
	return string(out), 0
}

// Issue 14: "ferry service-key create|list|revoke" manage the keys a
// running server accepts; a revoked key is refused on its next request.
func TestServiceKeyCLI(t *testing.T) {
	f := Start(t, Options{})
	if out, code := ferryCLI(t, f, "service-key", "create", "backend", "--scope", "tickets:create,bogus"); code == 0 || !strings.Contains(out, `unknown scope "bogus"`) {
		t.Fatalf("unknown scope: exit %d, %s", code, out)
	}
	out, code := ferryCLI(t, f, "service-key", "create", "backend", "--scope", "webhooks:manage", "--scope", "files:read")
	key := regexp.MustCompile(`fsk_[A-Za-z0-9_-]+`).FindString(out)
	id := regexp.MustCompile(`svk_[a-z0-9]+`).FindString(out)
	if code != 0 || key == "" || id == "" {
		t.Fatalf("create: exit %d, %s", code, out)
	}
	want(t, f.Do("GET", "/admin/webhooks", key, nil), 200, "")
	want(t, f.Do("GET", "/admin/users", key, nil), 403, "admin_only")

	out, _ = ferryCLI(t, f, "service-key", "list")
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, id) {
			line = l
		}
	}
	if !strings.Contains(line, "webhooks:manage,files:read") || strings.HasSuffix(line, "never") {
		t.Fatalf("list: want the key with its scopes and a last use:\n%s", out)
	}

	if out, code := ferryCLI(t, f, "service-key", "revoke", id); code != 0 {
		t.Fatalf("revoke: exit %d, %s", code, out)
	}
	want(t, f.Do("GET", "/admin/webhooks", key, nil), 401, "unauthenticated")
	if out, _ := ferryCLI(t, f, "service-key", "list"); strings.Contains(out, id) {
		t.Fatalf("revoked key still listed:\n%s", out)
	}
}

// Issue 14, done-when 2: the same new user arrives by JWT on two replicas
// (two ferry processes on one MariaDB) at once and is created once, by
// the unique (issuer, subject) index. One replica takes the issuer's keys
// from its JWK Set, the other from FERRY_JWT_KEYS.
func TestJWTUserCreatedOnceAcrossReplicas(t *testing.T) {
	testenv.MySQLServerDSN(t) // skips (or fails in CI) without MySQL
	iss := testenv.NewIssuer(t)
	jwtEnv := map[string]string{"FERRY_JWT_ISSUER": iss.Issuer, "FERRY_JWT_AUDIENCE": iss.Audience}
	envA := maps.Clone(jwtEnv)
	envA["FERRY_JWT_JWKS_URL"] = iss.JWKSURL
	a := Start(t, Options{MySQL: true, Env: envA})
	pemFile := filepath.Join(t.TempDir(), "issuer.pem")
	if err := os.WriteFile(pemFile, []byte(iss.PublicPEM(t, "rsa1")+iss.PublicPEM(t, "ec1")), 0o600); err != nil {
		t.Fatal(err)
	}
	envB := maps.Clone(jwtEnv)
	envB["FERRY_JWT_KEYS"] = pemFile
	for _, kv := range a.Env {
		if k, v, _ := strings.Cut(kv, "="); k == "FERRY_DB_DRIVER" || k == "FERRY_DB_DSN" {
			envB[k] = v
		}
	}
	b := Start(t, Options{Env: envB})

	const subjects, perReplica = 4, 6
	type answer struct {
		status int
		id     string
		err    error
	}
	results := make([][]answer, subjects)
	start := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for s := range subjects {
		results[s] = make([]answer, 2*perReplica)
		for i := range 2 * perReplica {
			f, kid := a, "rsa1"
			if i%2 == 1 {
				f, kid = b, "ec1"
			}
			tok := iss.Mint(t, kid, testenv.With(iss.Claims(fmt.Sprintf("racer-%d", s)), "name", "Racer"))
			wg.Go(func() {
				<-start
				req, _ := http.NewRequest("GET", f.URL+"/me", nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := client.Do(req)
				if err != nil {
					results[s][i] = answer{err: err}
					return
				}
				defer resp.Body.Close()
				var m struct{ ID, Subject string }
				json.NewDecoder(resp.Body).Decode(&m)
				results[s][i] = answer{status: resp.StatusCode, id: m.ID}
			})
		}
	}
	close(start)
	wg.Wait()

	db := ferryDB(t, a)
	for s := range subjects {
		for i, r := range results[s] {
			if r.err != nil || r.status != 200 || r.id != results[s][0].id {
				t.Fatalf("subject %d request %d: %+v; want 200 as %s", s, i, r, results[s][0].id)
			}
		}
		var n int64
		db.Model(&models.User{}).Where("issuer = ? AND subject = ?", iss.Issuer, fmt.Sprintf("racer-%d", s)).Count(&n)
		if n != 1 {
			t.Fatalf("subject %d: %d users, want 1", s, n)
		}
	}
	// Deactivated through one replica, the user is refused by both.
	id := results[0][0].id
	admin := cliCreateAdmin(t, a)
	want(t, a.Do("POST", "/admin/users/"+id+"/deactivate", admin, nil), 200, "")
	for _, f := range []*Ferry{a, b} {
		want(t, f.Do("GET", "/me", iss.Mint(t, "rsa1", iss.Claims("racer-0")), nil), 401, "user_deactivated")
	}
}
