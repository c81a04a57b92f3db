package errkind_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ferry-io/ferry/errkind"
)

// KindOf finds every kind, wrapped or not, and nothing in a plain error.
func TestKindOfFindsEveryKind(t *testing.T) {
	ks := errkind.Kinds()
	if len(ks) < 13 {
		t.Fatalf("only %d kinds", len(ks))
	}
	seen := map[*errkind.Kind]bool{}
	for _, k := range ks {
		if seen[k] {
			t.Fatalf("kind %v listed twice", k)
		}
		seen[k] = true
		err := fmt.Errorf("outer: %w", errkind.New(k, "some_code", "detail"))
		if got := errkind.KindOf(err); got != k {
			t.Errorf("KindOf(%v) = %v, want %v", err, got, k)
		}
	}
	if k := errkind.KindOf(errors.New("plain")); k != nil {
		t.Fatalf("KindOf(plain error) = %v", k)
	}
}
