package models

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"
	"strings"

	mysqldrv "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
)

// errDatabaseUnavailable is what a call that could not reach the database
// carries: a 503 to clients (retry later), and a wait rather than a used-up
// attempt to jobs.
var errDatabaseUnavailable = errkind.New(errkind.Unavailable, "database_unavailable", "the database is unreachable; retry in a moment")

// Unreachable reports whether err says the database could not be reached
// or did not answer in time (refused or reset connections, timeouts, a
// server going away), as opposed to a query it refused.
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var me *mysqldrv.MySQLError
	if errors.As(err, &me) {
		// 1053 server shutdown, 2002/2003 cannot connect, 2006/2013 gone
		// away or lost mid-query, 1040 too many connections.
		switch me.Number {
		case 1040, 1053, 2002, 2003, 2006, 2013:
			return true
		}
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysqldrv.ErrInvalidConn) ||
		errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	// SQLite's busy and locked answers mean another writer holds the
	// file: transient in the same way.
	msg := err.Error()
	return strings.Contains(msg, "database is locked") || strings.Contains(msg, "SQLITE_BUSY") ||
		strings.Contains(msg, "connection refused") || strings.Contains(msg, "broken pipe")
}

// translateUnavailable is a GORM callback run after every statement: an
// error that says the database is unreachable becomes one of kind
// errkind.Unavailable, with the driver's error kept in the chain for logs.
// That is the boundary where ferry learns about outages, so handlers answer
// 503 and jobs wait, whichever package made the call.
func translateUnavailable(db *gorm.DB) {
	if db.Error != nil && !errors.Is(db.Error, errkind.Unavailable) && Unreachable(db.Error) {
		e := *errDatabaseUnavailable
		e.Err = db.Error
		db.Error = &e
	}
}

// registerUnavailable installs translateUnavailable after every kind of
// statement GORM runs.
func registerUnavailable(db *gorm.DB) error {
	cb := db.Callback()
	return errors.Join(
		cb.Create().After("*").Register("ferry:unavailable", translateUnavailable),
		cb.Query().After("*").Register("ferry:unavailable", translateUnavailable),
		cb.Update().After("*").Register("ferry:unavailable", translateUnavailable),
		cb.Delete().After("*").Register("ferry:unavailable", translateUnavailable),
		cb.Row().After("*").Register("ferry:unavailable", translateUnavailable),
		cb.Raw().After("*").Register("ferry:unavailable", translateUnavailable),
	)
}
