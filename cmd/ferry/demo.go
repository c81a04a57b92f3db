package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/users"
)

const demoUsage = "usage: ferry demo seed [--users N] [--conversations N] [--messages N] [--seed S] [--prefix NAME]"

// cmdDemoSeed runs "ferry demo seed": synthetic users and chat history for
// demos and benchmarks.
func cmdDemoSeed(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo seed")
	nUsers := fs.Int("users", 6, "users taking part (created as PREFIX1..PREFIXn when missing)")
	nConvs := fs.Int("conversations", 4, "conversations to create")
	nMsgs := fs.Int("messages", 1000, "messages to write")
	seed := fs.Uint64("seed", 1, "random seed: the same seed gives the same shape of data")
	prefix := fs.String("prefix", "demo", "user name prefix")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 || *nUsers < 2 || *nConvs < 1 || *nMsgs < 0 {
		return usageError{errors.New(demoUsage + " (at least 2 users and 1 conversation)")}
	}
	ctx := context.Background()
	db, err := openMigrated(ctx, stderr)
	if err != nil {
		return err
	}
	defer closeDB(db)

	usersSvc, err := users.New(users.Config{DB: db})
	if err != nil {
		return err
	}
	existing, err := usersSvc.List(ctx)
	if err != nil {
		return err
	}
	byName := map[string]string{}
	for _, u := range existing {
		byName[u.Name] = u.ID
	}
	var ids []string
	for i := 1; i <= *nUsers; i++ {
		name := *prefix + strconv.Itoa(i)
		if id, ok := byName[name]; ok {
			ids = append(ids, id)
			fmt.Fprintf(stdout, "user %s (id %s) exists\n", name, id)
			continue
		}
		u, token, err := usersSvc.Create(ctx, name, false)
		if errors.Is(err, errkind.Invalid) {
			return usageError{err}
		}
		if err != nil {
			return err
		}
		ids = append(ids, u.ID)
		fmt.Fprintf(stdout, "user %s (id %s) token: %s\n", name, u.ID, token)
	}

	start := time.Now()
	step := max(*nMsgs/10, 1)
	next := step
	rep, err := chat.Seed(ctx, db, chat.SeedOptions{
		Users: ids, Conversations: *nConvs, Messages: *nMsgs, Seed: *seed,
		Progress: func(done int) {
			if done >= next {
				fmt.Fprintf(stderr, "seeded %d/%d messages\n", done, *nMsgs)
				next = done + step
			}
		},
	})
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	fmt.Fprintf(stdout, "seeded %d conversations, %d messages, %d joins, %d leaves, %d recalls in %s (%.0f messages/s); last gseq %d\n",
		len(rep.Conversations), rep.Messages, rep.Joins, rep.Leaves, rep.Recalls, elapsed.Round(time.Millisecond),
		float64(rep.Messages)/max(elapsed.Seconds(), 1e-9), rep.LastGseq)
	return nil
}
