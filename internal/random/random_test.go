package random

import "testing"

func TestLengthsAndVariety(t *testing.T) {
	if a, b := Hex(16), Hex(16); len(a) != 32 || a == b {
		t.Fatalf("Hex(16) = %q, %q", a, b)
	}
	if a := URLSafe(32); len(a) != 43 {
		t.Fatalf("URLSafe(32) has %d characters, want 43", len(a))
	}
	if b := Bytes(15); len(b) != 15 {
		t.Fatalf("Bytes(15) has %d bytes", len(b))
	}
}
