package e2e

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDocRunner holds TestDocs to its conventions, on a plain HTTP server
// instead of ferry: an answer or exit status a command does not announce
// fails it, an announced one that does not come fails it too, placeholders
// are refused but for the preset variables, variables persist from block
// to block, and a command that hangs is killed.
func TestDocRunner(t *testing.T) {
	requireTool(t, "bash")
	requireTool(t, "curl")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		if err != nil {
			code = 200
		}
		w.WriteHeader(code)
		w.Write([]byte(`{"token":"fry_secret"}`)) // no newline: the mark must still be found
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	s := startDocSession(t, append(cleanEnv(), "ADMIN=fry_preset"), t.TempDir())

	stmt := func(t *testing.T, src string) docStmt {
		t.Helper()
		stmts, err := splitDocBlock(docBlock{File: "x.md", Line: 10, Lang: "sh", Text: src + "\n"}, addr)
		if err != nil {
			t.Fatal(err)
		}
		if len(stmts) != 1 {
			t.Fatalf("%q: %d commands, want 1", src, len(stmts))
		}
		return stmts[0]
	}
	for _, tc := range []struct{ src, problem string }{
		{"curl -s localhost:8080/200", ""},
		{"curl -s localhost:8080/403", "HTTP 403 from GET"},
		{"curl -s localhost:8080/403 | cat   # expect: 403", ""},
		{"curl -s localhost:8080/200   # expect: 404", "announces HTTP 404"},
		{"curl -s localhost:8080/404 localhost:8080/500   # expect: 404", "HTTP 500"},
		{"curl -s http://127.0.0.1:1/ | cat", "no HTTP answer"}, // the pipe hides curl's exit status
		{"(exit 3)", "exit status 3"},
		{"(exit 4)   # expect: exit 4", ""},
		{"true   # expect: exit 4", "announces exit 4"},
		{"T=$(curl -s localhost:8080/201)", ""},
		{`[ "$T" = '{"token":"fry_secret"}' ]`, ""}, // the body alone, and it persists
		{"export ADMIN=fry_…   # pasted by a reader", ""},
		{`[ "$ADMIN" = fry_preset ]`, ""}, // kept as the runner set it
	} {
		t.Run(tc.src, func(t *testing.T) {
			got, out := runDocStmt(s, stmt(t, tc.src))
			if tc.problem == "" && got != "" || !strings.Contains(got, tc.problem) {
				t.Fatalf("problem %q, want %q\n%s", got, tc.problem, out)
			}
		})
	}

	t.Run("placeholder", func(t *testing.T) {
		_, err := splitDocBlock(docBlock{File: "x.md", Line: 3, Lang: "sh",
			Text: "echo ok\ncurl -H 'Authorization: Bearer fry_…' localhost:8080/me\n"}, addr)
		if err == nil || !strings.Contains(err.Error(), "x.md:5: placeholder") {
			t.Fatalf("err %v, want a placeholder at x.md:5", err)
		}
		_, err = splitDocBlock(docBlock{File: "x.md", Line: 3, Lang: "sh",
			Text: "sort <in >out\ncurl -d '{\"subject\":\"<your user id>\"}' localhost:8080/tickets\n"}, addr)
		if err == nil || !strings.Contains(err.Error(), "x.md:5: placeholder") {
			t.Fatalf("err %v, want a placeholder at x.md:5 (and none at the redirections)", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		s := startDocSession(t, cleanEnv(), t.TempDir())
		start := time.Now()
		if _, _, err := s.run("sleep 30", 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "still running") {
			t.Fatalf("err %v, want a timeout", err)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the hung command was not killed in time")
		}
	})
	t.Run("blocks", func(t *testing.T) {
		src := "a\n```\nx\n```\n```sh no-run needs Docker\ndocker run\n```\n  ```json\n  {}\n  ```\n"
		bs, err := parseDocBlocks("y.md", src)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 3 || bs[0].Lang != "" || bs[0].Line != 2 || !bs[1].NoRun || bs[1].Reason != "needs Docker" ||
			bs[1].Text != "docker run\n" || bs[2].Lang != "json" || bs[2].Text != "{}\n" {
			t.Fatalf("blocks %+v", bs)
		}
		if _, err := parseDocBlocks("y.md", "```sh\nopen\n"); err == nil {
			t.Fatal("an unclosed block was accepted")
		}
		// Inline code that shows a fence is not one (CommonMark: no
		// backtick in a backtick fence's info string).
		if bs, err := parseDocBlocks("y.md", "- ```` ```sh ```` blocks run\n  ```` ```bash ```` too\n"); err != nil || len(bs) != 0 {
			t.Fatalf("inline code read as blocks: %+v %v", bs, err)
		}
	})
}
