package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferry-io/ferry/notify/receiver"
)

// attachment is a file of a post, as the app knows it: from the verified
// upload.completed webhook, never from what the uploader's browser said.
type attachment struct {
	FileID      string    `json:"file_id"`
	Name        string    `json:"name"`
	Size        int64     `json:"size"`
	SHA256      string    `json:"sha256"`
	ContentType string    `json:"content_type"`
	UploadedBy  string    `json:"uploaded_by"`
	VerifiedAt  time.Time `json:"verified_at"`
}

// share is a grant the app asked ferry for, kept so that only the
// uploader may revoke it, and only through the post it was made for.
type share struct {
	GrantID, FileID, PostID, User string
}

// posts is the app's own data: which post holds which file, and the
// grants it made. A real app keeps this in its database.
type posts struct {
	mu     sync.Mutex
	files  map[string][]attachment // post id → its files, in the order ferry verified them
	shares map[string]share        // grant id → share
}

func newPosts() *posts {
	return &posts{files: map[string][]attachment{}, shares: map[string]share{}}
}

// attach records a file on a post once: ferry may deliver a webhook more
// than once, and although the receiver drops copies it has seen, a
// record that is idempotent by itself costs nothing.
func (p *posts) attach(post string, a attachment) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.ContainsFunc(p.files[post], func(x attachment) bool { return x.FileID == a.FileID }) {
		return false
	}
	p.files[post] = append(p.files[post], a)
	return true
}

func (p *posts) list(post string) []attachment {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.files[post])
}

func (p *posts) file(post, fileID string) (attachment, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.IndexFunc(p.files[post], func(x attachment) bool { return x.FileID == fileID })
	if i < 0 {
		return attachment{}, false
	}
	return p.files[post][i], true
}

func (p *posts) addShare(s share) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.shares[s.GrantID] = s
}

func (p *posts) share(grantID string) (share, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.shares[grantID]
	return s, ok
}

func (p *posts) dropShare(grantID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.shares, grantID)
}

// app is the host app: its users, its posts, its identity and its link
// to ferry. Everything it needs is here; nothing is global.
type app struct {
	log     *slog.Logger
	users   []string // the app's users; each one's id is also their JWT subject
	issuer  *issuer
	ferry   *ferryAPI
	posts   *posts
	maxSize int64         // the largest file a ticket allows
	ticketT time.Duration // how long a ticket may wait for its upload to start
}

// routes is the app's HTTP surface. hooks receives ferry's webhooks.
func (a *app) routes(hooks http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/jwks.json", a.jwks)
	mux.HandleFunc("POST /login", a.login)
	mux.HandleFunc("POST /posts/{post}/upload-ticket", a.signedIn(a.uploadTicket))
	mux.HandleFunc("GET /posts/{post}", a.signedIn(a.post))
	mux.HandleFunc("POST /posts/{post}/files/{file}/grants", a.signedIn(a.grant))
	mux.HandleFunc("DELETE /posts/{post}/files/{file}/grants/{grant}", a.signedIn(a.revoke))
	mux.Handle("POST /webhooks/ferry", hooks)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	return a.logged(mux)
}

// logged logs one line per request, which is most of what one needs to
// follow the walkthrough from the app's side.
func (a *app) logged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: 200}
		next.ServeHTTP(sw, r)
		a.log.Info("request", "method", r.Method, "path", r.URL.Path, "status", sw.status, "elapsed", time.Since(start).Round(time.Microsecond))
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) { s.status = code; s.ResponseWriter.WriteHeader(code) }

// jwks serves the public key ferry checks the app's tokens with. ferry
// fetches it at start-up, hourly, and when a token names a kid it has not
// seen.
func (a *app) jwks(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.Write(a.issuer.jwks)
}

// login is the app's sign-in, cut down to naming a user: a real app
// checks a password or an SSO assertion first. Its answer is the JWT that
// both the app and ferry accept.
func (a *app) login(w http.ResponseWriter, r *http.Request) {
	var req struct{ User string }
	if !readJSON(w, r, &req) {
		return
	}
	if !slices.Contains(a.users, req.User) {
		writeError(w, http.StatusUnauthorized, "no such user")
		return
	}
	tok, exp, err := a.issuer.mint(req.User, req.User, time.Now())
	if err != nil {
		a.log.Error("mint failed", "err", err)
		writeError(w, http.StatusInternalServerError, "cannot sign in now")
		return
	}
	a.log.Info("signed in", "user", req.User, "expires_at", exp)
	writeJSON(w, 200, map[string]any{"user": req.User, "token": tok, "expires_at": exp})
}

// signedIn runs h for a request carrying a JWT the app minted, with the
// user it names.
func (a *app) signedIn(h func(w http.ResponseWriter, r *http.Request, user string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			writeError(w, http.StatusUnauthorized, "sign in first: POST /login")
			return
		}
		user, err := a.issuer.verify(tok)
		if err != nil || !slices.Contains(a.users, user) {
			writeError(w, http.StatusUnauthorized, "invalid token")
			return
		}
		if !validPostID(r.PathValue("post")) {
			writeError(w, http.StatusBadRequest, "a post id is 1 to 64 letters, digits, '-' or '_'")
			return
		}
		h(w, r, user)
	}
}

// validPostID keeps post ids to what is safe in a URL path and a log
// line, and short: they go into the ticket's metadata.
func validPostID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// uploadTicket gives the caller a ticket to attach one file to the post.
// The app decides what goes into the metadata, so the webhook can be
// believed: the post and the uploader come from here, not from the
// browser.
func (a *app) uploadTicket(w http.ResponseWriter, r *http.Request, user string) {
	post := r.PathValue("post")
	t, err := a.ferry.createTicket(r.Context(), user, map[string]string{"post_id": post, "uploaded_by": user}, a.maxSize, a.ticketT)
	if err != nil {
		a.ferryFailed(w, "create ticket", err)
		return
	}
	a.log.Info("ticket created", "user", user, "post_id", post, "ticket_id", t.TicketID, "ferry_user", t.UserID)
	writeJSON(w, http.StatusCreated, map[string]any{
		"ticket": t.Ticket, "ticket_id": t.TicketID, "expires_at": t.ExpiresAt,
		"max_size": a.maxSize, "ferry_url": a.ferry.base,
	})
}

// post lists a post's files. In this example every signed-in user may
// see every post; the app's own rules go here.
func (a *app) post(w http.ResponseWriter, r *http.Request, _ string) {
	post := r.PathValue("post")
	writeJSON(w, 200, map[string]any{"post_id": post, "files": a.posts.list(post)})
}

// grant lets the file's uploader share it with another user of the app.
// The service key could grant any file to anyone, so the app's rule is
// checked here first: the file is on this post, and the caller put it
// there.
func (a *app) grant(w http.ResponseWriter, r *http.Request, user string) {
	post, fileID := r.PathValue("post"), r.PathValue("file")
	var req struct{ User string }
	if !readJSON(w, r, &req) {
		return
	}
	f, ok := a.posts.file(post, fileID)
	switch {
	case !ok:
		writeError(w, http.StatusNotFound, "no such file on this post")
		return
	case f.UploadedBy != user:
		writeError(w, http.StatusForbidden, "only the uploader shares a file")
		return
	case !slices.Contains(a.users, req.User) || req.User == user:
		writeError(w, http.StatusBadRequest, "share with another user of the app")
		return
	}
	g, err := a.ferry.createGrant(r.Context(), fileID, req.User)
	if err != nil {
		a.ferryFailed(w, "create grant", err)
		return
	}
	a.posts.addShare(share{GrantID: g.GrantID, FileID: fileID, PostID: post, User: req.User})
	a.log.Info("file shared", "post_id", post, "file_id", fileID, "by", user, "with", req.User, "grant_id", g.GrantID)
	// The link is the grantee's: it is signed for their ferry user, and
	// ferry checks the grant on every request, so handing it to them is
	// all the app does. A real app would show it to them, not to the
	// uploader.
	writeJSON(w, http.StatusCreated, map[string]any{
		"grant_id": g.GrantID, "user": req.User, "download_url": g.DownloadURL, "download_url_expires_at": g.LinkExpires,
	})
}

// revoke stops a share; the grantee's link answers 410 from its next
// request on.
func (a *app) revoke(w http.ResponseWriter, r *http.Request, user string) {
	post, fileID, grantID := r.PathValue("post"), r.PathValue("file"), r.PathValue("grant")
	s, ok := a.posts.share(grantID)
	f, fok := a.posts.file(post, fileID)
	if !ok || !fok || s.PostID != post || s.FileID != fileID {
		writeError(w, http.StatusNotFound, "no such share")
		return
	}
	if f.UploadedBy != user {
		writeError(w, http.StatusForbidden, "only the uploader stops sharing a file")
		return
	}
	if err := a.ferry.revokeGrant(r.Context(), grantID); err != nil {
		a.ferryFailed(w, "revoke grant", err)
		return
	}
	a.posts.dropShare(grantID)
	a.log.Info("share revoked", "post_id", post, "file_id", fileID, "grant_id", grantID, "user", s.User)
	w.WriteHeader(http.StatusNoContent)
}

// completed is the data of ferry's upload.completed event that the app
// uses. Metadata is the ticket's, set by the app itself; ClientMetadata
// (not read here) is what the uploader said and is only user input.
type completed struct {
	FileID      string            `json:"file_id"`
	Name        string            `json:"name"`
	Size        int64             `json:"size"`
	SHA256      string            `json:"sha256"`
	ContentType string            `json:"content_type"`
	VerifiedAt  time.Time         `json:"verified_at"`
	TicketID    string            `json:"ticket_id"`
	Metadata    map[string]string `json:"metadata"`
}

// onWebhook processes a webhook that receiver.Handler has verified and
// claimed. An error makes ferry deliver it again later, so it is
// returned only for what a retry could fix; a message the app does not
// want is acknowledged and logged.
func (a *app) onWebhook(_ context.Context, m *receiver.Message) error {
	if m.Type != "upload.completed" {
		a.log.Info("webhook ignored", "webhook_id", m.ID, "type", m.Type)
		return nil
	}
	var ev completed
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		// Signed by ferry yet not what the app expects: retrying would
		// not help; an operator should look.
		a.log.Error("webhook undecodable", "webhook_id", m.ID, "err", err)
		return nil
	}
	post, user := ev.Metadata["post_id"], ev.Metadata["uploaded_by"]
	if post == "" || user == "" {
		a.log.Info("webhook for a file of no post", "webhook_id", m.ID, "file_id", ev.FileID)
		return nil
	}
	added := a.posts.attach(post, attachment{FileID: ev.FileID, Name: ev.Name, Size: ev.Size, SHA256: ev.SHA256,
		ContentType: ev.ContentType, UploadedBy: user, VerifiedAt: ev.VerifiedAt})
	a.log.Info("file attached", "webhook_id", m.ID, "post_id", post, "file_id", ev.FileID, "uploaded_by", user,
		"size", ev.Size, "sha256", ev.SHA256, "ticket_id", ev.TicketID, "new", added)
	return nil
}

// ferryFailed answers a failed call to ferry. ferry's client errors the
// app's caller can act on keep their status (a file not verified yet is
// 409: try again in a moment); anything else is the app's 502.
func (a *app) ferryFailed(w http.ResponseWriter, what string, err error) {
	var p *problem
	if errors.As(err, &p) && p.Status >= 400 && p.Status < 500 && p.Status != http.StatusUnauthorized && p.Status != http.StatusForbidden {
		a.log.Warn("ferry refused", "call", what, "status", p.Status, "code", p.Code)
		writeJSON(w, p.Status, map[string]string{"error": p.Detail, "code": p.Code})
		return
	}
	// 401 and 403 mean the service key is wrong or lacks a scope: the
	// app's configuration, not the caller's request.
	a.log.Error("ferry call failed", "call", what, "err", err)
	writeError(w, http.StatusBadGateway, "the file service failed; try again later")
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body")
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store") // tickets, tokens and links are credentials
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // keep the & of download URLs readable
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
