package random

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
)

// Bytes returns n random bytes.
func Bytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// Hex returns n random bytes as lower-case hex.
func Hex(n int) string { return hex.EncodeToString(Bytes(n)) }

// URLSafe returns n random bytes as unpadded base64url: a token that
// travels in URLs and headers as it is.
func URLSafe(n int) string { return base64.RawURLEncoding.EncodeToString(Bytes(n)) }
