package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

// The contract client fails an exchange the document does not describe,
// and only that: here a stand-in answers as told, so each case shows one
// kind of mismatch the e2e suites would catch in ferry's answers.
func TestContractClientCatchesMismatches(t *testing.T) {
	var status int
	var ctype, body string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	defer ts.Close()
	hc := newContractClient(ts.URL)
	problem := `{"type":"about:blank","title":"Bad Request","status":400,"code":"invalid_json","detail":"x"}`
	tests := []struct {
		name, method, path string
		reqBody            any
		status             int
		ctype, body        string
		wantErr            string
	}{
		{"described answer", "GET", "/healthz", nil, 200, "application/json; charset=utf-8", `{"status":"ok"}`, ""},
		{"wrong body", "GET", "/healthz", nil, 200, "application/json", `{"status":"fine"}`, "not as server/openapi.yaml says"},
		{"extra field", "GET", "/healthz", nil, 200, "application/json", `{"status":"ok","uptime":1}`, "not as server/openapi.yaml says"},
		{"undocumented status", "DELETE", "/files/f1", nil, 200, "application/json", `{}`, "not as server/openapi.yaml says"},
		{"problem as plain JSON", "GET", "/files/f1", nil, 404, "application/json", problem, "not as server/openapi.yaml says"},
		{"refused request, refused answer", "POST", "/admin/users", map[string]any{"nmae": "x"}, 400, "application/problem+json", problem, ""},
		{"refused request, accepted", "POST", "/admin/users", map[string]any{"nmae": "x"}, 201, "application/json", `{}`, "which server/openapi.yaml refuses"},
		{"undocumented route served", "GET", "/nowhere", nil, 200, "application/json", `{}`, "which server/openapi.yaml refuses"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, ctype, body = tc.status, tc.ctype, tc.body
			_, err := send(context.Background(), hc, ts.URL, tc.method, tc.path, "fry_x", tc.reqBody)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected mismatch: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
	// Other hosts (the bucket's presigned URLs) are not checked.
	other := newContractClient("http://127.0.0.1:1")
	status, ctype, body = 200, "application/json", `{"anything":true}`
	if _, err := send(context.Background(), other, ts.URL, "GET", "/healthz", "", nil); err != nil {
		t.Fatalf("another host's answer was checked: %v", err)
	}
}

// A bare http.Get goes through http.DefaultTransport, which TestMain made
// a contract transport: it checks the exchanges with a ferry the harness
// watches (here a stand-in answering what the document does not
// describe) and stops checking once the test that started it ends.
func TestDefaultTransportHeldToContract(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"fine"}`))
	}))
	defer ts.Close()
	get := func() error {
		resp, err := http.Get(ts.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(); err != nil {
		t.Fatalf("a server nobody watches was checked: %v", err)
	}
	t.Run("watched", func(t *testing.T) {
		watchContract(t, ts.URL)
		if err := get(); err == nil || !strings.Contains(err.Error(), "not as server/openapi.yaml says") {
			t.Fatalf("err = %v, want the contract's refusal", err)
		}
	})
	if err := get(); err != nil {
		t.Fatalf("still checked after the watching test ended: %v", err)
	}
}

// What run.mjs records of Chromium's traffic is checked like the test
// process's own: a described answer passes, an undocumented member and a
// 2xx to a request the document refuses are mismatches.
func TestBrowserExchangesHeldToContract(t *testing.T) {
	ex := func(method, path, reqBody string, status int, body string) map[string]any {
		return map[string]any{"method": method, "url": "http://127.0.0.1:9/" + strings.TrimPrefix(path, "/"),
			"headers": map[string]string{"authorization": "Bearer fry_x", "content-type": "application/json"}, "body": reqBody,
			"status": status, "respHeaders": map[string]string{"content-type": "application/json; charset=utf-8"}, "respBody": body}
	}
	raw, _ := json.Marshal([]any{
		ex("GET", "/healthz", "", 200, `{"status":"ok"}`),
		ex("GET", "/healthz", "", 200, `{"status":"ok","uptime":1}`),
		ex("POST", "/admin/users", `{"nmae":"x"}`, 201, `{}`),
	})
	n, errs, err := browserMismatches(string(raw))
	if err != nil || n != 3 || len(errs) != 2 {
		t.Fatalf("%d exchanges, mismatches %v, err %v; want 3 and 2", n, errs, err)
	}
	if !strings.Contains(errs[0].Error(), "not as server/openapi.yaml says") || !strings.Contains(errs[1].Error(), "which server/openapi.yaml refuses") {
		t.Fatalf("mismatches %v", errs)
	}
}

// The binary serves the contract: /openapi.json is a valid OpenAPI 3.1
// document by the specification's schema, and /docs the reference page
// whose script ferry serves itself.
func TestOpenAPIServedByFerry(t *testing.T) {
	f := Start(t, Options{})
	r := f.Do("GET", "/openapi.json", "", nil)
	if r.Status != 200 {
		t.Fatalf("GET /openapi.json = %d", r.Status)
	}
	doc, err := libopenapi.NewDocument(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", v)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		t.Fatalf("/openapi.json is not valid OpenAPI 3.1:\n%s", describe(verrs))
	}
	page := f.Do("GET", "/docs", "", nil)
	if page.Status != 200 || !strings.Contains(string(page.Body), `src="/assets/redoc.standalone.js"`) {
		t.Fatalf("GET /docs = %d %.200s", page.Status, page.Body)
	}
	if js := f.Do("GET", "/assets/redoc.standalone.js", "", nil); js.Status != 200 || len(js.Body) < 100_000 {
		t.Fatalf("the reference page's script: %d, %d bytes", js.Status, len(js.Body))
	}
}
