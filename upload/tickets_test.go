package upload_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/upload"
)

// ticket creates a ticket for user and resolves its secret, as the HTTP
// layer does for each request.
func (e *env) ticket(user string, r upload.TicketRequest) (string, *upload.Ticket) {
	e.t.Helper()
	r.UserID, r.CreatedBy = user, "svk_test"
	secret, _, err := e.svc.CreateTicket(context.Background(), r)
	if err != nil {
		e.t.Fatalf("create ticket: %v", err)
	}
	return secret, e.resolve(secret)
}

func (e *env) resolve(secret string) *upload.Ticket {
	e.t.Helper()
	t, err := e.svc.TicketBySecret(context.Background(), secret)
	if err != nil {
		e.t.Fatalf("resolve ticket: %v", err)
	}
	return &t
}

// initWith starts an upload of data under a ticket.
func (c *client) initWith(t *upload.Ticket, name, contentType string, size int64, meta upload.Metadata) (upload.InitResult, error) {
	return c.svc.Init(context.Background(), c.user, upload.InitRequest{
		FileName: name, Size: size, ContentType: contentType, PartSize: 5 * mib, Ticket: t, Metadata: meta,
	})
}

// Done-when 3 in the service: a ticket with metadata {"post_id":"42"},
// max_size and content_types. An upload past the size or of another type
// is refused and leaves the ticket as it was; one within it makes a file
// of the ticket's user that carries both metadata, as does its
// upload.completed event; the ticket then cannot start another upload,
// and an unused ticket past its expiry is refused.
func TestTicketUpload(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		c := newClient(t, e, "usr_alice")
		data := randomBytes(6*mib + 17)
		secret, tk := e.ticket(c.user, upload.TicketRequest{
			Metadata: upload.Metadata{"post_id": "42"}, MaxSize: int64(len(data)), ContentTypes: []string{"video/*", "application/pdf"},
		})
		if !strings.HasPrefix(secret, upload.TicketPrefix) || tk.UploadID != "" || tk.Metadata["post_id"] != "42" {
			t.Fatalf("ticket %s: %+v", secret, tk)
		}

		_, err := c.initWith(tk, "clip.mp4", "video/mp4", int64(len(data))+1, nil)
		wantKind(t, err, errkind.TooLarge, "ticket_max_size")
		_, err = c.initWith(tk, "clip.png", "image/png", int64(len(data)), nil)
		wantKind(t, err, errkind.Invalid, "content_type_not_allowed")
		_, err = c.initWith(tk, "clip.mp4", "video/mp4", int64(len(data)), upload.Metadata{"": "x"})
		wantKind(t, err, errkind.Invalid, "invalid_metadata")
		if n := e.count("uploads", "user_id = ?", c.user); n != 0 || e.resolve(secret).UploadID != "" {
			t.Fatalf("refused inits left %d uploads, ticket %+v", n, e.resolve(secret))
		}

		res, err := c.initWith(tk, "clip.mp4", "video/mp4; codecs=avc1", int64(len(data)), upload.Metadata{"caption": "our trip"})
		if err != nil || res.Outcome != upload.Created {
			t.Fatalf("init within the ticket: %v %+v", err, res)
		}
		c.send(res.Upload, data, allParts(res.Upload), false)
		if _, err := e.svc.Complete(ctx, c.user, res.Upload.UploadID, upload.CompleteRequest{}); err != nil {
			t.Fatal(err)
		}
		st := e.waitVerified(c.user, res.Upload.UploadID, 30*time.Second)
		f, err := e.svc.File(ctx, c.user, st.FileID)
		if err != nil || f.Metadata["post_id"] != "42" || f.ClientMetadata["caption"] != "our trip" || f.TicketID != tk.ID || f.SHA256 != sha(data) {
			t.Fatalf("file %+v, %v", f, err)
		}
		ev := outboxData[upload.CompletedEvent](e, res.Upload.UploadID, notify.UploadCompleted)
		if ev.Metadata["post_id"] != "42" || ev.ClientMetadata["caption"] != "our trip" || ev.TicketID != tk.ID || ev.FileID != f.ID || ev.UserID != c.user {
			t.Fatalf("upload.completed %+v", ev)
		}

		// Once used, the ticket starts nothing else, even for a file that
		// fits it; it still answers for its own upload.
		used := e.resolve(secret)
		if !used.Covers(res.Upload.UploadID) || used.Covers("upl_other") {
			t.Fatalf("used ticket %+v", used)
		}
		_, err = c.initWith(used, "other.mp4", "video/mp4", 5*mib, nil)
		wantKind(t, err, errkind.Conflict, "ticket_used")
		_, err = c.initWith(used, "clip.mp4", "video/mp4", int64(len(data)), nil)
		wantKind(t, err, errkind.Conflict, "ticket_used") // its upload is over: no second file of it
		if n := e.count("files", "ticket_id = ?", tk.ID); n != 1 {
			t.Fatalf("%d files of the ticket, want 1", n)
		}

		// An unused ticket works until it expires, not after.
		late, _ := e.ticket(c.user, upload.TicketRequest{TTL: time.Minute})
		e.clock.Advance(time.Minute)
		if _, err := e.svc.TicketBySecret(ctx, late); !errors.Is(err, upload.ErrTicketExpired) {
			t.Fatalf("expired ticket: %v", err)
		}
		if _, err := e.svc.TicketBySecret(ctx, upload.TicketPrefix+"nonsense"); !errors.Is(err, upload.ErrTicketUnknown) {
			t.Fatalf("unknown ticket: %v", err)
		}
		// The used ticket outlives its expiry for its upload, until the
		// upload has ended and cleanup forgets it.
		e.clock.Advance(2 * time.Hour)
		if _, err := e.svc.TicketBySecret(ctx, secret); err != nil {
			t.Fatalf("used ticket after expiry: %v", err)
		}
		rep, err := e.svc.Cleanup(ctx)
		if err != nil || rep.Tickets != 2 {
			t.Fatalf("cleanup %+v %v; want both expired tickets forgotten", rep, err)
		}
		if _, err := e.svc.TicketBySecret(ctx, secret); !errors.Is(err, upload.ErrTicketUnknown) {
			t.Fatalf("forgotten ticket: %v", err)
		}
	})
}

// One ticket makes at most one upload however many inits race: the claim
// is a conditional update in the transaction that inserts the upload.
// The client that lost its state and starts the same file again gets the
// ticket's upload back, to resume.
func TestTicketIsOneUploadUnderRace(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		c := newClient(t, e, "usr_alice")
		secret, tk := e.ticket(c.user, upload.TicketRequest{})
		const n = 8
		var wg sync.WaitGroup
		results := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, results[i] = c.initWith(tk, fmt.Sprintf("f%d.bin", i), "", int64(5*mib+i), nil)
			}()
		}
		wg.Wait()
		created := 0
		for _, err := range results {
			switch {
			case err == nil:
				created++
			case errkind.KindOf(err) == errkind.Conflict:
			default:
				t.Fatalf("init: %v", err)
			}
		}
		if created != 1 || e.count("uploads", "ticket_id = ?", tk.ID) != 1 {
			t.Fatalf("%d inits succeeded and %d uploads carry the ticket, want 1", created, e.count("uploads", "ticket_id = ?", tk.ID))
		}
		if b := e.bucket(); len(b.Pending) != 1 {
			t.Fatalf("%d multipart uploads in the bucket, want the winner's only", len(b.Pending))
		}

		won := e.resolve(secret)
		u := e.upload(won.UploadID)
		res, err := c.initWith(won, u.FileName, "", u.Size, nil)
		if err != nil || res.Outcome != upload.Resumed || res.Upload.UploadID != u.ID {
			t.Fatalf("the same file again: %+v %v, want the ticket's upload resumed", res, err)
		}
		// Its upload declares its hash: a ticket's upload never turns into
		// an instant file or a proof, it stays the one upload.
		r, err := e.svc.DeclareSHA256(context.Background(), c.user, u.ID, sha([]byte("whatever")))
		if err != nil || r.Outcome != upload.Resumed || r.Upload.UploadID != u.ID {
			t.Fatalf("declare: %+v %v", r, err)
		}
	})
}
