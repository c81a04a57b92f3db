package receiver_test

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/ferry-io/ferry/notify/receiver"
)

func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	rand.Read(b)
	return receiver.SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// signed builds the headers ferry would send for body at ts.
func signed(t *testing.T, secret, id string, ts time.Time, body []byte) http.Header {
	t.Helper()
	key, err := receiver.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(receiver.HeaderID, id)
	h.Set(receiver.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(receiver.HeaderSignature, receiver.Sign(key, id, ts, body))
	return h
}

func TestVerify(t *testing.T) {
	secret, other := newSecret(t), newSecret(t)
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"type":"upload.completed","timestamp":"2026-11-02T10:00:00Z","data":{"size":1}}`)
	good := signed(t, secret, "evt_1", now, body)
	otherSig := signed(t, other, "evt_1", now, body).Get(receiver.HeaderSignature)
	with := func(k, v string) http.Header {
		h := good.Clone()
		h.Set(k, v)
		return h
	}
	tests := []struct {
		name   string
		header http.Header
		body   []byte
		now    time.Time
		want   error
	}{
		{"valid", good, body, now, nil},
		{"clock 5 min behind", good, body, now.Add(-5 * time.Minute), nil},
		{"clock 5 min ahead", good, body, now.Add(5 * time.Minute), nil},
		{"too old", good, body, now.Add(5*time.Minute + time.Second), receiver.ErrTimestamp},
		{"too new", good, body, now.Add(-5*time.Minute - time.Second), receiver.ErrTimestamp},
		{"tampered body", good, append([]byte{' '}, body...), now, receiver.ErrSignature},
		{"other id", with(receiver.HeaderID, "evt_2"), body, now, receiver.ErrSignature},
		{"other timestamp", with(receiver.HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10)), body, now, receiver.ErrSignature},
		{"timestamp not a number", with(receiver.HeaderTimestamp, "2026-11-02"), body, now, receiver.ErrTimestamp},
		{"other secret", with(receiver.HeaderSignature, otherSig), body, now, receiver.ErrSignature},
		{"one of several signatures", with(receiver.HeaderSignature, otherSig+" v1,AAAA "+good.Get(receiver.HeaderSignature)), body, now, nil},
		{"wrong version", with(receiver.HeaderSignature, "v2"+strings.TrimPrefix(good.Get(receiver.HeaderSignature), "v1")), body, now, receiver.ErrSignature},
		{"signature on a second header line", func() http.Header {
			h := with(receiver.HeaderSignature, otherSig)
			h.Add(receiver.HeaderSignature, good.Get(receiver.HeaderSignature))
			return h
		}(), body, now, nil},
		{"no signature", with(receiver.HeaderSignature, ""), body, now, receiver.ErrMissingHeaders},
		{"no id", with(receiver.HeaderID, ""), body, now, receiver.ErrMissingHeaders},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := receiver.NewVerifier(secret)
			if err != nil {
				t.Fatal(err)
			}
			v.Now = func() time.Time { return tc.now }
			id, ts, err := v.Verify(tc.header, tc.body)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if tc.want == nil && (id != "evt_1" || !ts.Equal(now)) {
				t.Fatalf("id, ts = %q, %v", id, ts)
			}
		})
	}
	// A receiver holding several secrets accepts any of them.
	v, _ := receiver.NewVerifier(other, secret)
	v.Now = func() time.Time { return now }
	if _, _, err := v.Verify(good, body); err != nil {
		t.Fatalf("second of two secrets: %v", err)
	}
}

// Interop with the reference Standard Webhooks library, both ways.
func TestStandardWebhooksInterop(t *testing.T) {
	secret := newSecret(t)
	ref, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := receiver.NewVerifier(secret)
	body := []byte(`{"type":"export.completed","timestamp":"2026-11-02T10:00:00.123456Z","data":{"export_id":"exp_1"}}`)
	now := time.Now()

	t.Run("receiver verifies the reference signature", func(t *testing.T) {
		sig, err := ref.Sign("msg_ref", now, body)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set("webhook-id", "msg_ref")
		h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		h.Set("webhook-signature", sig)
		if _, _, err := v.Verify(h, body); err != nil {
			t.Fatalf("receiver rejected the reference library's signature: %v", err)
		}
		if _, _, err := v.Verify(h, append(body, '\n')); !errors.Is(err, receiver.ErrSignature) {
			t.Fatalf("tampered body: %v", err)
		}
	})
	t.Run("reference verifies receiver.Sign", func(t *testing.T) {
		h := signed(t, secret, "msg_ours", now, body)
		if err := ref.Verify(body, h); err != nil {
			t.Fatalf("reference library rejected receiver.Sign: %v", err)
		}
		if err := ref.Verify(append(body, '\n'), h); err == nil {
			t.Fatal("reference library accepted a tampered body")
		}
	})
}

// The package must stay cheap to import: the standard library and nothing
// else, in particular none of gin, gorm or the rest of ferry.
func TestImportsOnlyStandardLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/ferry-io/ferry/notify/receiver").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) != 1 || deps[0] != "github.com/ferry-io/ferry/notify/receiver" {
		t.Fatalf("receiver imports non-standard packages: %v", deps)
	}
}
