// Package chattest holds test doubles for the interfaces package chat
// consumes from other features.
package chattest

import (
	"context"

	"github.com/ferry-io/ferry/errkind"
)

// Files is a fixed set of files, file id → owner, standing in for the
// uploads feature's file index.
type Files map[string]string

// Owned returns a NotFound error naming the first id userID does not own.
func (f Files) Owned(_ context.Context, userID string, ids []string) error {
	for _, id := range ids {
		if f[id] != userID {
			return errkind.New(errkind.NotFound, "file_not_found", "no such file: %s", id)
		}
	}
	return nil
}
