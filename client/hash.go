package client

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// digests are what one read of the file yields: the whole file's SHA-256
// (for instant upload and verification) and each part's MD5 (pinned as
// Content-MD5, and compared with S3's part ETags on resume).
type digests struct {
	sha256 string
	md5    [][md5.Size]byte // md5[n-1] is part n's
}

func (d digests) md5Hex(n int) string { return hex.EncodeToString(d.md5[n-1][:]) }

// defaultPartSize is what the client asks for: 8 MiB, raised to the next
// MiB that keeps the file within S3's 10,000 parts.
func defaultPartSize(size int64) int64 {
	const min, maxParts = 8 << 20, 10_000
	ps := int64(min)
	if (size+ps-1)/ps > maxParts {
		ps = ((size+maxParts-1)/maxParts + (1 << 20) - 1) >> 20 << 20
	}
	return ps
}

// hashFile reads r once and computes the digests. The SHA-256 and the MD5s
// run on their own goroutines fed from a small pool of chunks, so hashing
// uses two cores and memory stays at a few MiB whatever the file's size.
// withSHA false computes only the part MD5s.
func hashFile(ctx context.Context, r io.ReaderAt, size, partSize int64, withSHA bool, m *meter) (digests, error) {
	const chunkSize, chunks = 1 << 20, 8
	type chunk struct {
		b    []byte
		refs *atomic.Int32
	}
	pool := make(chan []byte, chunks)
	for range chunks {
		pool <- make([]byte, chunkSize)
	}
	release := func(c chunk) {
		if c.refs.Add(-1) == 0 {
			pool <- c.b[:cap(c.b)]
		}
	}
	consumers := 1
	if withSHA {
		consumers = 2
	}
	toSHA, toMD5 := make(chan chunk, chunks), make(chan chunk, chunks)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(toSHA)
		defer close(toMD5)
		for off := int64(0); off < size; {
			var b []byte
			select {
			case b = <-pool:
			case <-ctx.Done():
				return ctx.Err()
			}
			n := min(int64(len(b)), size-off)
			if _, err := r.ReadAt(b[:n], off); err != nil && err != io.EOF {
				return fmt.Errorf("ferry: read at %d: %w", off, err)
			}
			c := chunk{b: b[:n], refs: new(atomic.Int32)}
			c.refs.Store(int32(consumers))
			if withSHA {
				toSHA <- c
			}
			toMD5 <- c
			off += n
			m.add(n)
		}
		return nil
	})
	var d digests
	if withSHA {
		g.Go(func() error {
			h := sha256.New()
			for c := range toSHA {
				h.Write(c.b)
				release(c)
			}
			d.sha256 = hex.EncodeToString(h.Sum(nil))
			return nil
		})
	}
	g.Go(func() error {
		h := md5.New()
		var inPart int64
		for c := range toMD5 {
			for b := c.b; len(b) > 0; {
				take := min(int64(len(b)), partSize-inPart)
				h.Write(b[:take])
				inPart += take
				b = b[take:]
				if inPart == partSize {
					d.md5 = append(d.md5, [md5.Size]byte(h.Sum(nil)))
					h.Reset()
					inPart = 0
				}
			}
			release(c)
		}
		if inPart > 0 {
			d.md5 = append(d.md5, [md5.Size]byte(h.Sum(nil)))
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return digests{}, err
	}
	return d, nil
}
