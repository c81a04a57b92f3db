package main

import (
	"context"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/errkind"
)

// noFiles stands in for the uploads feature's file index until it is
// wired: it refuses every attachment, clearly, instead of accepting ids
// nobody checked.
type noFiles struct{}

var _ chat.Files = noFiles{}

func (noFiles) Owned(context.Context, string, []string) error {
	return errkind.New(errkind.Unprocessable, "attachments_unavailable",
		"this server does not accept attachments yet: file uploads are not enabled")
}
