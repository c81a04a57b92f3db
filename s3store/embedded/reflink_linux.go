package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// MergesShareBlocks reports whether the embedded store's merges are free
// on dataDir's filesystem. VersityGW makes the object at
// CompleteMultipartUpload by appending every part to a new file with
// copy_file_range(2), which shares the parts' blocks on a filesystem
// with reflinks (XFS made with reflink=1, btrfs) and copies every byte
// elsewhere (ext4, tmpfs): there a merge writes the whole upload a
// second time before it can succeed.
//
// copy_file_range falls back to a copy without saying so, so the probe
// asks for the share itself: FICLONE of a small file into another, in
// the store's directory. An answer that the filesystem cannot clone is
// false with a nil error; anything else that stops the probe is an
// error.
func MergesShareBlocks(dataDir string) (bool, error) {
	dir := filepath.Join(dataDir, "s3")
	src, err := os.CreateTemp(dir, ".ferry-reflink-*")
	if err != nil {
		return false, err
	}
	defer os.Remove(src.Name())
	defer src.Close()
	// One filesystem block's worth: the smallest a clone shares.
	if _, err := src.Write(make([]byte, 4096)); err != nil {
		return false, err
	}
	dst, err := os.CreateTemp(dir, ".ferry-reflink-*")
	if err != nil {
		return false, err
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	err = unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EXDEV):
		return false, nil
	default:
		return false, fmt.Errorf("embedded: FICLONE in %s: %w", dir, err)
	}
}
