package receiver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ferry-io/ferry/notify/receiver"
)

// A backend mounts Handler on the URL it registered with ferry. Here ferry
// is played by a few lines that sign a message the way ferry does and send
// it twice, as a retry would.
func Example() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // from POST /admin/webhooks

	v, err := receiver.NewVerifier(secret)
	if err != nil {
		panic(err)
	}
	h := &receiver.Handler{
		Verifier: v,
		Store:    receiver.NewMemoryStore(24*time.Hour, nil),
		Process: func(ctx context.Context, m *receiver.Message) error {
			var d struct {
				FileID string `json:"file_id"`
				Size   int64  `json:"size"`
			}
			if err := json.Unmarshal(m.Data, &d); err != nil {
				return err
			}
			fmt.Printf("processing %s %s: file %s, %d bytes\n", m.ID, m.Type, d.FileID, d.Size)
			return nil
		},
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	// What ferry sends.
	id := "evt_example"
	body := []byte(`{"type":"upload.completed","timestamp":"2026-11-02T10:00:00Z","data":{"file_id":"fil_1","size":42}}`)
	key, _ := receiver.ParseSecret(secret)
	for range 2 {
		now := time.Now()
		req, _ := http.NewRequest("POST", srv.URL, bytes.NewReader(body))
		req.Header.Set(receiver.HeaderID, id)
		req.Header.Set(receiver.HeaderTimestamp, fmt.Sprint(now.Unix()))
		req.Header.Set(receiver.HeaderSignature, receiver.Sign(key, id, now, body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	// Output:
	// processing evt_example upload.completed: file fil_1, 42 bytes
	// 204
	// 204
}

// Verifier alone checks a message inside any framework. Hold both secrets
// while ferry rotates them.
func ExampleVerifier_Verify() {
	oldSecret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	newSecret := "whsec_dGhpcyBpcyBhIG5ldyBzZWNyZXQga2V5IGZvciB0ZXN0cw=="
	v, _ := receiver.NewVerifier(newSecret, oldSecret)

	body := []byte(`{"type":"export.completed","timestamp":"2026-11-02T10:00:00Z","data":{}}`)
	key, _ := receiver.ParseSecret(oldSecret)
	now := time.Now()
	header := http.Header{}
	header.Set("webhook-id", "evt_1")
	header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	header.Set("webhook-signature", receiver.Sign(key, "evt_1", now, body))

	id, _, err := v.Verify(header, body)
	fmt.Println(id, err)

	_, _, err = v.Verify(header, append(body, ' '))
	fmt.Println(err)
	// Output:
	// evt_1 <nil>
	// receiver: no valid signature
}
