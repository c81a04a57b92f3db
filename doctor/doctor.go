package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/config"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/presign"
)

// Status is how one check ended.
type Status string

// The statuses a check ends with. Only Fail makes the report fail.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "FAIL"
	Skip Status = "skip"
)

// Result is one row of the report.
type Result struct {
	Check   string
	Status  Status
	Finding string
	// Change says what to change, naming the FERRY_* setting; empty when
	// nothing needs changing.
	Change string
}

// Report is every check's result, in the order they ran.
type Report struct {
	Results []Result
}

// Failed reports whether any check failed.
func (r *Report) Failed() bool {
	return slices.ContainsFunc(r.Results, func(x Result) bool { return x.Status == Fail })
}

// Find returns the result of the named check, if it ran.
func (r *Report) Find(check string) (Result, bool) {
	for _, x := range r.Results {
		if x.Check == check {
			return x, true
		}
	}
	return Result{}, false
}

func (r *Report) add(check string, st Status, finding, change string) {
	r.Results = append(r.Results, Result{Check: check, Status: st, Finding: finding, Change: change})
}

// Write prints the report as a table, then one line with the verdict.
func (r *Report) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tFINDING\tWHAT TO CHANGE")
	for _, x := range r.Results {
		change := x.Change
		if change == "" {
			change = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.Check, x.Status, oneLine(x.Finding), oneLine(change))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	n := 0
	for _, x := range r.Results {
		if x.Status == Fail {
			n++
		}
	}
	var err error
	if n > 0 {
		_, err = fmt.Fprintf(w, "\n%d check(s) failed.\n", n)
	} else {
		_, err = fmt.Fprintln(w, "\nall checks passed.")
	}
	return err
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Options tune a run. Zero values take the defaults.
type Options struct {
	Log *slog.Logger
	Now func() time.Time
}

// The check names, as the report's first column shows them.
const (
	CheckDatabase   = "database"
	CheckMigrations = "migrations"
	CheckLinkKeys   = "link keys"
	CheckStore      = "object store"
	CheckStoreDisk  = "store disk"
	CheckBucket     = "bucket"
	CheckPublic     = "public endpoint"
	CheckCORS       = "bucket CORS"
	CheckChecksums  = "checksums"
	CheckLifecycle  = "lifecycle"
	CheckClock      = "clock skew"
	CheckWebhooks   = "webhooks"
)

// Run checks cfg's deployment and returns the report. It never fails as a
// whole: what it cannot check is a row of its own.
func Run(ctx context.Context, cfg *config.Config, o Options) *Report {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	rep := &Report{}
	db := checkDatabase(ctx, rep, cfg, o)
	if db != nil {
		defer func() {
			if sqlDB, err := db.DB(); err == nil {
				sqlDB.Close()
			}
		}()
	}
	checkLinkKeys(rep, cfg)
	checkStorage(ctx, rep, cfg, o)
	checkWebhooks(ctx, rep, cfg, db, o)
	return rep
}

// checkDatabase opens the database and compares its applied migrations
// with this binary's. It returns the database when it is usable.
func checkDatabase(ctx context.Context, rep *Report, cfg *config.Config, o Options) *gorm.DB {
	if cfg.DBDriver == config.DriverSQLite {
		// SQLite cannot create its file in a missing directory; serve
		// makes the data dir the same way.
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			rep.add(CheckDatabase, Fail, "cannot create the data dir: "+err.Error(), "FERRY_DATA_DIR: a directory ferry may write")
			rep.add(CheckMigrations, Skip, "the database is not reachable", "")
			return nil
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	db, err := models.Open(dctx, cfg.DBDriver, cfg.DBDSN, o.Log)
	if err != nil {
		rep.add(CheckDatabase, Fail, fmt.Sprintf("%s %s: %v", cfg.DBDriver, config.RedactDSN(cfg.DBDriver, cfg.DBDSN), err),
			"FERRY_DB_DSN (and FERRY_DB_DRIVER): a database ferry can reach with these credentials")
		rep.add(CheckMigrations, Skip, "the database is not reachable", "")
		return nil
	}
	rep.add(CheckDatabase, OK, fmt.Sprintf("%s %s answers", cfg.DBDriver, config.RedactDSN(cfg.DBDriver, cfg.DBDSN)), "")

	known, err := models.Migrations()
	if err != nil {
		rep.add(CheckMigrations, Fail, "this binary's migrations: "+err.Error(), "")
		return db
	}
	applied, err := models.AppliedVersions(dctx, db)
	if err != nil {
		// No schema_migrations table: nothing was ever applied.
		applied = nil
	}
	var pending, unknown []int
	for _, m := range known {
		if !slices.Contains(applied, m.Version) {
			pending = append(pending, m.Version)
		}
	}
	for _, v := range applied {
		if !slices.ContainsFunc(known, func(m models.Migration) bool { return m.Version == v }) {
			unknown = append(unknown, v)
		}
	}
	latest := known[len(known)-1].Version
	switch {
	case len(pending) > 0:
		rep.add(CheckMigrations, Fail, fmt.Sprintf("%d of %d migrations not applied (first missing: %04d)", len(pending), len(known), pending[0]),
			"run `ferry migrate` (serve also migrates at start-up); if the schema should be there, FERRY_DB_DSN names the wrong database")
		// The webhook check reads tables that may not exist yet.
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
		return nil
	case len(unknown) > 0:
		rep.add(CheckMigrations, Warn, fmt.Sprintf("the database has migrations this binary does not know (%v): it was migrated by a newer ferry", unknown),
			"run the ferry version that migrated it; migrations are forward-only (docs/operating.md)")
	default:
		rep.add(CheckMigrations, OK, fmt.Sprintf("all %d applied (latest %04d)", len(known), latest), "")
	}
	return db
}

// checkLinkKeys parses the download-link keys serve would sign with.
func checkLinkKeys(rep *Report, cfg *config.Config) {
	keys := cfg.LinkKeys
	source := "FERRY_LINK_KEYS"
	if len(keys) == 0 {
		path := filepath.Join(cfg.DataDir, "link-keys")
		b, err := os.ReadFile(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if cfg.DBDriver == config.DriverMySQL {
				rep.add(CheckLinkKeys, Warn, "FERRY_LINK_KEYS is empty: each replica generates its own key, and a link signed by one fails on another",
					"FERRY_LINK_KEYS: one key list shared by every replica (docs/operating.md)")
				return
			}
			rep.add(CheckLinkKeys, OK, "none yet: serve generates one in "+path+" on first start", "")
			return
		case err != nil:
			rep.add(CheckLinkKeys, Fail, err.Error(), "FERRY_DATA_DIR must be readable, or set FERRY_LINK_KEYS")
			return
		}
		if keys, err = presign.ParseKeys(strings.TrimSpace(string(b))); err != nil {
			rep.add(CheckLinkKeys, Fail, path+": "+err.Error(), "remove the damaged file (links it signed stop working) or set FERRY_LINK_KEYS")
			return
		}
		source = path
	}
	if _, err := presign.NewSigner(keys, time.Now); err != nil {
		rep.add(CheckLinkKeys, Fail, source+": "+err.Error(), "FERRY_LINK_KEYS")
		return
	}
	finding := fmt.Sprintf("%d key(s) from %s, signing with %q", len(keys), source, keys[0].ID)
	if cfg.DBDriver == config.DriverMySQL && len(cfg.LinkKeys) == 0 {
		rep.add(CheckLinkKeys, Warn, finding+"; replicas do not share a key kept in one data dir",
			"FERRY_LINK_KEYS: one key list shared by every replica (docs/operating.md)")
		return
	}
	rep.add(CheckLinkKeys, OK, finding, "")
}

// checkWebhooks probes every active subscription's receiver.
func checkWebhooks(ctx context.Context, rep *Report, cfg *config.Config, db *gorm.DB, o Options) {
	if db == nil {
		rep.add(CheckWebhooks, Skip, "the database is not usable", "")
		return
	}
	// The queue is never used: checking targets sends nothing through it.
	queue, err := jobs.NewQueue(jobs.QueueConfig{DB: db})
	if err != nil {
		rep.add(CheckWebhooks, Fail, err.Error(), "")
		return
	}
	svc, err := notify.New(notify.Config{DB: db, Queue: queue, AllowPrivate: cfg.WebhookAllowPrivate, Log: o.Log, Timeout: 5 * time.Second})
	if err != nil {
		rep.add(CheckWebhooks, Fail, err.Error(), "")
		return
	}
	checks, err := svc.CheckTargets(ctx)
	if err != nil {
		rep.add(CheckWebhooks, Fail, "listing subscriptions: "+err.Error(), "")
		return
	}
	if len(checks) == 0 {
		rep.add(CheckWebhooks, OK, "no subscriptions", "")
		return
	}
	for _, c := range checks {
		name := CheckWebhooks + " " + c.Subscription.ID
		switch {
		case !c.Subscription.Active:
			rep.add(name, Warn, c.Subscription.URL+" is disabled: "+c.Subscription.DisabledReason,
				"POST /admin/webhooks/"+c.Subscription.ID+"/enable once the receiver is back")
		case errors.Is(c.Err, notify.ErrBlockedAddress):
			rep.add(name, Fail, c.Subscription.URL+": "+c.Err.Error(),
				"a public receiver URL; FERRY_WEBHOOK_ALLOW_PRIVATE=true only for development")
		case c.Err != nil:
			rep.add(name, Fail, c.Subscription.URL+" does not answer: "+c.Err.Error(),
				"start the receiver, or replace the subscription (DELETE /admin/webhooks/"+c.Subscription.ID+")")
		default:
			rep.add(name, OK, fmt.Sprintf("%s answered %d", c.Subscription.URL, c.Status), "")
		}
	}
}
