package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferry-io/ferry/users"
)

// The service-key commands manage keys on the database directly, like
// "ferry user create": they work before any admin token exists.

// cmdServiceKeyCreate is "ferry service-key create NAME --scope SCOPE…".
func cmdServiceKeyCreate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("service-key create")
	var scopes []string
	fs.Func("scope", "a scope the key holds ("+strings.Join(users.Scopes(), ", ")+"); repeat or separate with commas", func(v string) error {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				scopes = append(scopes, s)
			}
		}
		return nil
	})
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || len(scopes) == 0 {
		return usageError{errors.New("usage: ferry service-key create NAME --scope SCOPE [--scope SCOPE…]")}
	}
	return withUsers(stderr, func(ctx context.Context, us *users.Service) error {
		k, secret, err := us.CreateServiceKey(ctx, pos[0], scopes)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created service key %s (id %s, scopes %s)\nkey (shown once): %s\n", k.Name, k.ID, strings.Join(k.Scopes, " "), secret)
		return nil
	})
}

// cmdServiceKeyList is "ferry service-key list".
func cmdServiceKeyList(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("service-key list")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{errors.New("usage: ferry service-key list")}
	}
	return withUsers(stderr, func(ctx context.Context, us *users.Service) error {
		keys, err := us.ListServiceKeys(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tCREATED\tLAST USED")
		for _, k := range keys {
			last := "never"
			if k.LastUsedAt != nil {
				last = k.LastUsedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, strings.Join(k.Scopes, ","), k.CreatedAt.UTC().Format(time.RFC3339), last)
		}
		return tw.Flush()
	})
}

// cmdServiceKeyRevoke is "ferry service-key revoke ID".
func cmdServiceKeyRevoke(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("service-key revoke")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{errors.New("usage: ferry service-key revoke ID")}
	}
	return withUsers(stderr, func(ctx context.Context, us *users.Service) error {
		if err := us.RevokeServiceKey(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked service key %s\n", pos[0])
		return nil
	})
}

// withUsers runs fn on the users service of the migrated database.
func withUsers(stderr io.Writer, fn func(context.Context, *users.Service) error) error {
	ctx := context.Background()
	db, err := openMigrated(ctx, stderr)
	if err != nil {
		return err
	}
	defer closeDB(db)
	us, err := users.New(users.Config{DB: db})
	if err != nil {
		return err
	}
	return fn(ctx, us)
}
