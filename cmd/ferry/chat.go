package main

import (
	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/upload"
)

// Chat attachments are checked against the caller's uploaded files.
var _ chat.Files = (*upload.Service)(nil)
