package client

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"errors"
	"hash/crc32"
	"io"
	"runtime"
	"testing"
)

// Combining part checksums gives the checksum of the whole, for empty,
// tiny, odd and part-sized pieces.
func TestCRC32CCombine(t *testing.T) {
	for _, sizes := range [][]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {3, 5}, {5 << 20, 1}, {8 << 20, 8 << 20, 12345}, {7, 1 << 16, 255}} {
		var whole []byte
		var combined uint32
		for i, n := range sizes {
			b := make([]byte, n)
			rand.Read(b)
			whole = append(whole, b...)
			c := crc32.Checksum(b, castagnoli)
			if i == 0 {
				combined = c
			} else {
				combined = crc32cCombine(combined, c, int64(n))
			}
		}
		if want := crc32.Checksum(whole, castagnoli); combined != want {
			t.Fatalf("sizes %v: combined %08x, want %08x", sizes, combined, want)
		}
	}
}

// The checksum read streams each range through one small buffer: the
// digests match those of the whole range at once, whatever the part and
// head sizes, a file shorter than the range is an error, and the memory
// the read takes does not grow with the part.
func TestChecksumReadsStream(t *testing.T) {
	data := make([]byte, 3*headLength+12_345)
	rand.Read(data)
	r := bytes.NewReader(data)
	crcOf := func(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

	for _, c := range []struct{ off, length int64 }{{0, 1}, {0, sumChunk}, {sumChunk - 1, sumChunk + 2}, {5, int64(len(data)) - 5}} {
		crc, sum, err := sumRange(r, c.off, c.length, make([]byte, sumChunk), true)
		b := data[c.off : c.off+c.length]
		if err != nil || crc != crcOf(b) || sum != md5.Sum(b) {
			t.Fatalf("sumRange(%d, %d) = %08x, %x, %v; want %08x, %x", c.off, c.length, crc, sum, err, crcOf(b), md5.Sum(b))
		}
	}
	if _, _, err := sumRange(r, int64(len(data))-10, 11, make([]byte, sumChunk), false); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a range past the end: %v, want io.ErrUnexpectedEOF", err)
	}

	for _, c := range []struct{ size, partSize int64 }{
		{int64(len(data)), 5 << 20}, {int64(len(data)), headLength}, {int64(len(data)), 2*headLength + 7}, {1000, 5 << 20}, {headLength + 1, 64 << 20},
	} {
		part, head, err := firstCRC32Cs(r, c.size, c.partSize)
		wantPart, wantHead := crcOf(data[:min(c.partSize, c.size)]), crcOf(data[:min(headLength, c.size)])
		if err != nil || part != wantPart || head != wantHead {
			t.Fatalf("firstCRC32Cs(size %d, part %d) = %08x, %08x, %v; want %08x, %08x", c.size, c.partSize, part, head, err, wantPart, wantHead)
		}
	}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, _, err := firstCRC32Cs(r, int64(len(data)), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 2*sumChunk {
		t.Fatalf("reading a %d-byte first part allocated %d bytes, want at most %d", len(data), grew, 2*sumChunk)
	}
}
