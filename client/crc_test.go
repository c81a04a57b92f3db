package client

import (
	"crypto/rand"
	"hash/crc32"
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
