package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/upload"
	"github.com/ferry-io/ferry/users"
)

const ticketKey = "ferry.ticket"

// ticketPathPrefix is where Uppy 6 reaches the Companion routes with a
// ticket: its companionEndpoint sends no headers, so the ticket travels
// in the endpoint's path (companionEndpoint: FERRY_PUBLIC_URL +
// "/tickets/ftk_…").
const ticketPathPrefix = "/tickets/:ticket"

// routeTickets adds POST /tickets, for service keys with tickets:create.
func (s *Server) routeTickets(api *gin.RouterGroup) {
	api.POST("/tickets", requireScope(users.ScopeTicketsCreate), h(s.createTicket))
}

// ticketRoutes are the routes an upload ticket opens, by method and route
// template, and how each names the upload it acts on: "" (it starts the
// ticket's upload), "id" (ferry's upload id in :id) or "s3" (the S3
// UploadId in :uploadId, Companion's name for it). Every other route
// refuses a ticket.
var ticketRoutes = map[string]string{
	"POST /uploads":                           "",
	"GET /uploads/:id":                        "id",
	"DELETE /uploads/:id":                     "id",
	"POST /uploads/:id/presign":               "id",
	"PUT /uploads/:id/parts/:n":               "id",
	"POST /uploads/:id/complete":              "id",
	"POST /uploads/:id/sha256":                "id",
	"POST /s3/multipart":                      "",
	"GET /s3/params":                          "",
	"GET /s3/multipart/:uploadId":             "s3",
	"DELETE /s3/multipart/:uploadId":          "s3",
	"GET /s3/multipart/:uploadId/batch":       "s3",
	"GET /s3/multipart/:uploadId/:partNumber": "s3",
	"POST /s3/multipart/:uploadId/complete":   "s3",
}

var (
	errTicketRoute = errkind.New(errkind.Forbidden, "ticket_not_allowed",
		"an upload ticket opens only the upload routes of its one upload")
	errTicketUpload = errkind.New(errkind.NotFound, "upload_not_found", "no such upload")
)

// authenticateTicket resolves an upload ticket to its user, who must be
// active, and checks that the route is one the ticket opens, for the
// ticket's own upload. The caller is then that user, limited by the
// ticket (ticketOf).
func (s *Server) authenticateTicket(c *gin.Context, secret string) error {
	if s.d.Uploads == nil {
		return users.ErrUnauthenticated
	}
	ctx := c.Request.Context()
	t, err := s.d.Uploads.TicketBySecret(ctx, secret)
	if err != nil {
		return err
	}
	u, err := s.d.Users.Get(ctx, t.UserID)
	switch {
	case errors.Is(err, errkind.NotFound):
		return users.ErrUnauthenticated
	case err != nil:
		return err
	case !u.Active:
		return users.ErrUnauthenticated
	}
	route := c.Request.Method + " " + strings.TrimPrefix(c.FullPath(), ticketPathPrefix)
	names, ok := ticketRoutes[route]
	if !ok {
		return errTicketRoute
	}
	switch names {
	case "id":
		if !t.Covers(c.Param("id")) {
			return errTicketUpload
		}
	case "s3":
		m, err := s.d.Uploads.MultipartStatus(ctx, u.ID, c.Param("uploadId"))
		if err != nil {
			return err
		}
		if !t.Covers(m.UploadID) {
			return errTicketUpload
		}
	}
	c.Set(userKey, u)
	c.Set(ticketKey, &t)
	return nil
}

// ticketOf returns the ticket the request authenticated with, or nil.
func ticketOf(c *gin.Context) *upload.Ticket {
	if t, ok := c.Get(ticketKey); ok {
		return t.(*upload.Ticket)
	}
	return nil
}

// ticketFromPath authenticates the Companion routes under
// /tickets/{ticket}/s3 with the ticket in the path, for Uppy 6.
func (s *Server) ticketFromPath(c *gin.Context) {
	secret := c.Param("ticket")
	if err := s.refuseIfLocked(c); err != nil {
		abort(c, err)
		return
	}
	if !strings.HasPrefix(secret, upload.TicketPrefix) {
		s.authFailed(c, users.ErrUnauthenticated)
		abort(c, users.ErrUnauthenticated)
		return
	}
	if err := s.authenticateTicket(c, secret); err != nil {
		s.authFailed(c, err)
		abort(c, err)
		return
	}
	c.Next()
}

type ticketJSON struct {
	Ticket    string    `json:"ticket"`
	TicketID  string    `json:"ticket_id"`
	UserID    string    `json:"user_id"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (s *Server) createTicket(c *gin.Context) error {
	var req struct {
		UserID       string          `json:"user_id"`
		Subject      string          `json:"subject"`
		Metadata     json.RawMessage `json:"metadata"`
		MaxSize      *int64          `json:"max_size"`
		ContentTypes []string        `json:"content_types"`
		ExpiresIn    *int64          `json:"expires_in"`
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	meta, err := upload.ParseMetadata(req.Metadata, "metadata")
	if err != nil {
		return err
	}
	ttl, err := seconds(req.ExpiresIn, "expires_in")
	if err != nil {
		return err
	}
	var maxSize int64
	if req.MaxSize != nil {
		if *req.MaxSize <= 0 {
			return errkind.Invalidf("invalid_max_size", "max_size must be a positive number of bytes, or absent")
		}
		maxSize = *req.MaxSize
	}
	u, err := s.subjectUser(c, req.UserID, req.Subject)
	if err != nil {
		return err
	}
	k, _ := serviceKey(c)
	secret, t, err := s.d.Uploads.CreateTicket(c.Request.Context(), upload.TicketRequest{
		UserID: u.ID, CreatedBy: k.ID, Metadata: meta, MaxSize: maxSize, ContentTypes: req.ContentTypes, TTL: ttl,
	})
	if err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store")
	c.PureJSON(http.StatusCreated, ticketJSON{Ticket: secret, TicketID: t.ID, UserID: t.UserID, ExpiresAt: t.ExpiresAt})
	return nil
}

// seconds reads an optional positive number of seconds; nil is 0.
func seconds(v *int64, field string) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	if *v <= 0 || *v > int64(100*366*24*time.Hour/time.Second) {
		return 0, errkind.Invalidf("invalid_"+field, "%s must be a positive number of seconds, or absent", field)
	}
	return time.Duration(*v) * time.Second, nil
}

var errInactiveUser = errkind.New(errkind.Conflict, "user_inactive", "the user is deactivated")

// subjectUser finds the user a backend names, by ferry user id or by the
// host app's user id (the JWTs' subject): exactly one of the two.
func (s *Server) subjectUser(c *gin.Context, userID, subject string) (users.User, error) {
	ctx := c.Request.Context()
	switch {
	case (userID == "") == (subject == ""):
		return users.User{}, errkind.Invalidf("invalid_user", "give either user_id (a ferry user) or subject (your user's id), not both")
	case subject != "":
		return s.subjectToUser(ctx, subject)
	}
	u, err := s.d.Users.Get(ctx, userID)
	if err != nil {
		return users.User{}, err
	}
	if !u.Active {
		return users.User{}, errInactiveUser
	}
	return u, nil
}
