//go:build !linux

package embedded

import "errors"

// MergesShareBlocks is known only on Linux, where ferry asks the
// filesystem with FICLONE (reflink_linux.go).
func MergesShareBlocks(dataDir string) (bool, error) {
	return false, errors.ErrUnsupported
}
