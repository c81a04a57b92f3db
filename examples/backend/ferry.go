package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ferryAPI is the few calls the app makes to ferry, as its backend, with
// the service key. They are plain HTTP and JSON so that a team writing
// its backend in another language can read them as the protocol.
type ferryAPI struct {
	base string // ferry's URL, such as http://localhost:8080
	key  string // the service key, fsk_…
	hc   *http.Client
}

// problem is ferry's error answer (RFC 9457 problem+json). code is
// stable; the app branches on it, never on detail.
type problem struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

func (p *problem) Error() string {
	return fmt.Sprintf("ferry: %d %s: %s", p.Status, p.Code, p.Detail)
}

// call sends in as JSON (when not nil) and decodes a 2xx answer into out
// (when not nil). Any other answer is a *problem.
func (f *ferryAPI) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, f.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+f.key)
	if in != nil {
		req.Header.Set("Content-Type", "application/json") // ferry answers 415 without it
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		p := &problem{Status: resp.StatusCode}
		if json.Unmarshal(b, p) != nil || p.Code == "" {
			p.Code, p.Detail = "unexpected_answer", strings.TrimSpace(string(b))
		}
		return p
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// ticket is ferry's answer to POST /tickets.
type ticket struct {
	Ticket    string    `json:"ticket"` // ftk_…: give it to the uploader, it is shown once
	TicketID  string    `json:"ticket_id"`
	UserID    string    `json:"user_id"` // the ferry user of the subject
	ExpiresAt time.Time `json:"expires_at"`
}

// createTicket lets the app's user sub upload one file to ferry. metadata
// is trusted: the file and its upload.completed webhook carry it, and the
// uploader cannot change it. The ferry user is named by the JWT subject,
// so it need not exist yet.
func (f *ferryAPI) createTicket(ctx context.Context, sub string, metadata map[string]string, maxSize int64, ttl time.Duration) (ticket, error) {
	var t ticket
	err := f.call(ctx, "POST", "/tickets", map[string]any{
		"subject":    sub,
		"metadata":   metadata,
		"max_size":   maxSize,
		"expires_in": int64(ttl / time.Second),
	}, &t)
	return t, err
}

// grant is ferry's answer to POST /files/{id}/grants.
type grant struct {
	GrantID     string    `json:"grant_id"`
	FileID      string    `json:"file_id"`
	UserID      string    `json:"user_id"`
	DownloadURL string    `json:"download_url"` // signed for the grantee alone
	LinkExpires time.Time `json:"download_url_expires_at"`
}

// createGrant lets the app's user sub download file fileID. The service
// key may grant any file, so the app checks first that the caller may
// share it (see share).
func (f *ferryAPI) createGrant(ctx context.Context, fileID, sub string) (grant, error) {
	var g grant
	err := f.call(ctx, "POST", "/files/"+url.PathEscape(fileID)+"/grants", map[string]any{"subject": sub}, &g)
	return g, err
}

// revokeGrant stops a grant: the grantee's links answer 410 from their
// next request on. Revoking twice is harmless.
func (f *ferryAPI) revokeGrant(ctx context.Context, grantID string) error {
	return f.call(ctx, "DELETE", "/grants/"+url.PathEscape(grantID), nil, nil)
}

type webhook struct {
	ID     string `json:"id"`
	URL    string `json:"url"`
	Active bool   `json:"active"`
	Secret string `json:"secret"`
}

// registerWebhook makes ferry send upload.completed to hookURL and
// returns the signing secret. ferry shows a secret only when it makes
// one, so an app that registered before (and restarted, forgetting it)
// rotates the secret of its webhook instead of adding a second one; the
// old secret keeps signing alongside for ferry's grace period, so no
// delivery is lost in between. It needs the scope webhooks:manage.
func (f *ferryAPI) registerWebhook(ctx context.Context, hookURL string) (secret string, rotated bool, err error) {
	var list struct{ Webhooks []webhook }
	if err := f.call(ctx, "GET", "/admin/webhooks", nil, &list); err != nil {
		return "", false, err
	}
	for _, w := range list.Webhooks {
		if w.URL != hookURL {
			continue
		}
		var r webhook
		if err := f.call(ctx, "POST", "/admin/webhooks/"+url.PathEscape(w.ID)+"/rotate", nil, &r); err != nil {
			return "", false, err
		}
		if !w.Active { // ferry disables a webhook that kept failing; the app is back
			if err := f.call(ctx, "POST", "/admin/webhooks/"+url.PathEscape(w.ID)+"/enable", nil, nil); err != nil {
				return "", false, err
			}
		}
		return r.Secret, true, nil
	}
	var created webhook
	err = f.call(ctx, "POST", "/admin/webhooks", map[string]any{"url": hookURL, "events": []string{"upload.completed"}}, &created)
	return created.Secret, false, err
}
